package openapi

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
)

// Security scheme names of the served document.
const (
	// SchemeBearer is the member's or operator's JWT; operations of the
	// ops API require the role admin in it.
	SchemeBearer = "bearer"
	// SchemeProviderSignature is the payment provider's signature on its
	// callback.
	SchemeProviderSignature = "providerSignature"
)

// errorAnswer describes one error status the gateway answers: when, and
// the ErrorInfo reasons it carries.
type errorAnswer struct {
	name, description string
	reasons           []string
}

// errorAnswers are the error statuses of the REST API by HTTP status. The
// body is google.rpc.Status (rpcStatus) with an ErrorInfo detail.
var errorAnswers = map[int]errorAnswer{
	http.StatusBadRequest: {"BadRequest", "The request is malformed or a field breaks its rule (the ErrorInfo's metadata.field names it), or the resource is in a state that does not allow the call.",
		[]string{apierr.ReasonInvalidField, apierr.ReasonTaskFinished, apierr.ReasonOrderCodeClaimed}},
	http.StatusUnauthorized: {"Unauthorized", "No bearer token, or one that does not verify or has expired.",
		[]string{apierr.ReasonUnauthenticated}},
	http.StatusForbidden: {"Forbidden", "The token lacks the role the call needs: admin for the ops API, priority for a PRIORITY_HIGH submit (metadata.field names priority).",
		[]string{apierr.ReasonPermissionDenied}},
	http.StatusNotFound: {"NotFound", "No such resource of the caller's: unknown, expired and another member's ones get the same answer.",
		[]string{apierr.ReasonTaskNotFound, apierr.ReasonTaskExpired, apierr.ReasonPaymentNotFound}},
	http.StatusConflict: {"Conflict", "The order code is already used by the caller with another amount or description.",
		[]string{"ORDER_CODE_TAKEN"}},
	http.StatusRequestEntityTooLarge: {"PayloadTooLarge", "The body is larger than ORDERFLOW_GATEWAY_MAX_BODY_BYTES (64 KiB by default); field \"body\".",
		[]string{apierr.ReasonBodyTooLarge}},
	http.StatusTooManyRequests: {"TooManyRequests", "The caller is over its request rate (Retry-After says when to try again), or has too many watches open.",
		[]string{apierr.ReasonRateLimited, "TOO_MANY_WATCHES", "WATCH_CAPACITY"}},
	http.StatusInternalServerError: {"InternalError", "An unexpected failure; details are only in the logs.", nil},
	http.StatusServiceUnavailable: {"ServiceUnavailable", "Redis, RabbitMQ, the reconciler or the payment provider cannot be reached; retrying later (with the same requestId for a submit) is safe. metadata.outcome UNKNOWN means the call may have taken effect.",
		[]string{apierr.ReasonStoreUnavailable, apierr.ReasonQueueUnavailable, apierr.ReasonUpstream}},
	http.StatusGatewayTimeout: {"GatewayTimeout", "The reconciler or the payment provider did not answer in time; the outcome is unknown, so read the payment before placing it again.", nil},
}

// operationErrors lists the error statuses of each operation, by the
// operationId suffix (the RPC method name), besides the statuses every
// operation may answer (commonErrors).
var operationErrors = map[string][]int{
	"CreateOrderSplit":       {403},
	"GetTask":                {404},
	"CancelTask":             {404},
	"WatchTask":              {404},
	"CreatePayment":          {409, 504},
	"GetPayment":             {404, 504},
	"GetTaskDetail":          {404},
	"RetryTask":              {404},
	"FailTask":               {404},
	"ReplayDeadLetter":       {404},
	"DiscardDeadLetter":      {404},
	"ReleaseSlot":            {404},
	"GetPayment2":            {404},
	"RunPaymentCheck":        {404, 409},
	"ReschedulePaymentCheck": {404, 409},
	"CancelPaymentTracking":  {404, 409},
}

// commonErrors are answered by every operation: a malformed request,
// authentication, the body limit, the rate limit and failures.
var commonErrors = []int{400, 401, 413, 429, 500, 503}

// opsTag is the tag of the operations API, whose operations need the
// role admin.
const opsTag = "OpsService"

// toV31 turns the generated OpenAPI v2 document (with its rules applied)
// into an OpenAPI 3.1 one: components instead of definitions, request
// bodies, every error answer of each operation with the error body and
// the business error codes, security schemes, examples and the payment
// provider's callback.
func toV31(doc map[string]any) (map[string]any, error) {
	defs, _ := doc["definitions"].(map[string]any)
	schemas := map[string]any{}
	for name, s := range defs {
		schemas[name] = rewriteRefs(s)
	}
	addErrorSchemas(schemas)

	info, _ := doc["info"].(map[string]any)
	info["license"] = map[string]any{"name": "Proprietary", "identifier": "LicenseRef-orderflow"}
	info["contact"] = map[string]any{"name": "orderflow"}

	paths := map[string]any{}
	v2paths, _ := doc["paths"].(map[string]any)
	for path, item := range v2paths {
		methods, _ := item.(map[string]any)
		out := map[string]any{}
		for method, o := range methods {
			op, ok := o.(map[string]any)
			if !ok {
				continue
			}
			v3, err := operationV31(op)
			if err != nil {
				return nil, fmt.Errorf("openapi: %s %s: %w", strings.ToUpper(method), path, err)
			}
			out[method] = v3
		}
		paths[path] = out
	}
	paths["/v1/payments/notify"] = map[string]any{"post": notifyOperation()}
	paths["/v1/payments/{orderCode}/qr"] = map[string]any{"get": qrOperation()}
	paths["/v1/dev/login"] = map[string]any{"post": devLoginOperation()}

	responses := map[string]any{}
	answers := maps.Clone(errorAnswers)
	if d := bodyLimitDescription(v2paths); d != "" {
		// The document-level 413 of gateway_openapi.yaml says more.
		a := answers[http.StatusRequestEntityTooLarge]
		a.description = d
		answers[http.StatusRequestEntityTooLarge] = a
	}
	for status, a := range answers {
		responses[a.name] = errorResponse(status, a)
	}
	pruneSchemas(schemas, paths, responses)
	return map[string]any{
		"openapi": "3.1.0",
		"info":    info,
		"servers": []any{map[string]any{"url": "http://127.0.0.1:8080", "description": "The gateway as make run starts it."}},
		"tags": append(slices.Clone(asList(doc["tags"])),
			map[string]any{"name": "PaymentCallback", "description": "The payment provider's callback, authenticated by its signature."},
			map[string]any{"name": "DevLogin", "description": "Development-only sign-in (ORDERFLOW_DEV_LOGIN=true)."}),
		"paths":    paths,
		"security": []any{map[string]any{SchemeBearer: []any{}}},
		"components": map[string]any{
			"schemas":   schemas,
			"responses": responses,
			"securitySchemes": map[string]any{
				SchemeBearer: map[string]any{
					"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
					"description": "A member's token (member id in sub, exp required). Operations of the ops API need the role admin in the orderflow_roles claim: their security requirement names it.",
				},
				SchemeProviderSignature: map[string]any{
					"type": "apiKey", "in": "header", "name": "Wechatpay-Signature",
					"description": "The payment provider's RSA-SHA256 signature over \"timestamp\\nnonce\\nbody\\n\" (Wechatpay-Timestamp within 5 minutes, Wechatpay-Nonce, Wechatpay-Serial naming the key).",
				},
			},
		},
	}, nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// operationV31 converts one operation.
func operationV31(op map[string]any) (map[string]any, error) {
	out := map[string]any{}
	for _, k := range []string{"summary", "description", "operationId", "tags"} {
		if v, ok := op[k]; ok {
			out[k] = v
		}
	}
	id, _ := op["operationId"].(string)
	method := id[strings.LastIndexByte(id, '_')+1:]
	var params []any
	for _, p := range asList(op["parameters"]) {
		pm, _ := p.(map[string]any)
		if pm["in"] == "body" {
			body := map[string]any{"schema": rewriteRefs(pm["schema"])}
			if ex, ok := requestExamples[method]; ok {
				body["example"] = ex
			}
			out["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": body}}
			continue
		}
		params = append(params, parameterV31(pm))
	}
	if params != nil {
		out["parameters"] = params
	}
	v2resp, _ := op["responses"].(map[string]any)
	ok, _ := v2resp["200"].(map[string]any)
	if ok == nil {
		return nil, fmt.Errorf("no 200 answer")
	}
	responses := map[string]any{"200": map[string]any{
		"description": ok["description"],
		"content":     map[string]any{"application/json": map[string]any{"schema": rewriteRefs(ok["schema"])}},
	}}
	statuses := append(slices.Clone(commonErrors), operationErrors[method]...)
	tags, _ := op["tags"].([]any)
	admin := slices.Contains(tags, any(opsTag))
	if admin {
		if !slices.Contains(statuses, http.StatusForbidden) {
			statuses = append(statuses, http.StatusForbidden)
		}
		out["security"] = []any{map[string]any{SchemeBearer: []any{"admin"}}}
	}
	maps.Copy(responses, errorRefs(statuses...))
	out["responses"] = responses
	return out, nil
}

// parameterV31 moves a v2 parameter's type keywords into its schema.
func parameterV31(p map[string]any) map[string]any {
	out, schema := map[string]any{}, map[string]any{}
	for k, v := range p {
		switch k {
		case "name", "in", "required", "description":
			out[k] = v
		case "collectionFormat":
		default:
			schema[k] = rewriteRefs(v)
		}
	}
	out["schema"] = schema
	return out
}

// rewriteRefs returns v with every v2 "#/definitions/" reference turned
// into a "#/components/schemas/" one.
func rewriteRefs(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if k == "$ref" {
				if s, ok := e.(string); ok {
					out[k] = strings.Replace(s, "#/definitions/", "#/components/schemas/", 1)
					continue
				}
			}
			out[k] = rewriteRefs(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = rewriteRefs(e)
		}
		return out
	}
	return v
}

// addErrorSchemas adds the ErrorInfo detail and the business error code
// catalogue, and points every errorCode field at the catalogue.
func addErrorSchemas(schemas map[string]any) {
	var codes []int32
	for n := range errcodev1.ErrorCode_name {
		if n != 0 {
			codes = append(codes, n)
		}
	}
	sort.Slice(codes, func(i, j int) bool { return codes[i] < codes[j] })
	var lines []string
	enum := []any{0}
	for _, n := range codes {
		lines = append(lines, fmt.Sprintf("%d %s", n, strings.TrimPrefix(errcodev1.ErrorCode_name[n], "ERROR_CODE_")))
		enum = append(enum, n)
	}
	schemas["ErrorCode"] = map[string]any{
		"type": "integer", "format": "int32", "enum": enum,
		"description": "A business error code of orderflow's catalogue (orderflow.errcode.v1.ErrorCode); 0 means none. The numbers are a public contract, never changed or reused: " +
			strings.Join(lines, "; ") + ".",
	}
	schemas["ErrorInfo"] = map[string]any{
		"type":        "object",
		"description": "The google.rpc.ErrorInfo detail of every error answer (\"@type\": \"type.googleapis.com/google.rpc.ErrorInfo\").",
		"properties": map[string]any{
			"@type":    map[string]any{"type": "string", "const": "type.googleapis.com/google.rpc.ErrorInfo"},
			"reason":   map[string]any{"type": "string", "description": "The condition, e.g. INVALID_FIELD, TASK_NOT_FOUND, RATE_LIMITED."},
			"domain":   map[string]any{"type": "string"},
			"metadata": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}, "description": "field names the offending field; outcome UNKNOWN marks a call that may have taken effect."},
		},
	}
	if st, ok := schemas["rpcStatus"].(map[string]any); ok {
		props, _ := st["properties"].(map[string]any)
		props["details"] = map[string]any{"type": "array", "items": map[string]any{"anyOf": []any{
			map[string]any{"$ref": "#/components/schemas/ErrorInfo"},
			map[string]any{"$ref": "#/components/schemas/protobufAny"},
		}}}
	}
	for _, s := range schemas {
		sm, _ := s.(map[string]any)
		props, _ := sm["properties"].(map[string]any)
		if f, ok := props["errorCode"].(map[string]any); ok {
			props["errorCode"] = map[string]any{"$ref": "#/components/schemas/ErrorCode", "description": f["description"]}
		}
	}
}

// errorResponse is the shared response of one error status.
func errorResponse(status int, a errorAnswer) map[string]any {
	reason := "INTERNAL"
	if len(a.reasons) > 0 {
		reason = a.reasons[0]
	}
	desc := a.description
	if len(a.reasons) > 0 {
		desc += " Reasons: " + strings.Join(a.reasons, ", ") + "."
	}
	example := map[string]any{
		"code":    grpcCode[status],
		"message": http.StatusText(status),
		"details": []any{map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "orderflow", "metadata": map[string]any{}}},
	}
	if status == http.StatusBadRequest {
		example["message"] = "orderCode: must not be empty"
		example["details"] = []any{map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": apierr.ReasonInvalidField, "domain": "orderflow", "metadata": map[string]any{"field": "orderCode"}}}
	}
	r := map[string]any{
		"description": desc,
		"content": map[string]any{"application/json": map[string]any{
			"schema":  map[string]any{"$ref": "#/components/schemas/rpcStatus"},
			"example": example,
		}},
	}
	if status == http.StatusTooManyRequests {
		r["headers"] = map[string]any{"Retry-After": map[string]any{"description": "Seconds to wait before trying again.", "schema": map[string]any{"type": "integer"}}}
	}
	return r
}

// grpcCode is the gRPC code grpc-gateway answers each status for.
var grpcCode = map[int]int{400: 3, 401: 16, 403: 7, 404: 5, 409: 6, 413: 3, 429: 8, 500: 13, 503: 14, 504: 4}

// requestExamples are example request bodies by method.
var requestExamples = map[string]any{
	"CreateOrderSplit": map[string]any{
		"orderCode": "SO-1001", "requestId": "tour-1",
		"items": []any{
			map[string]any{"itemCode": "A1", "sku": "SKU-TEA-500G", "quantity": 2},
			map[string]any{"itemCode": "A2", "sku": "SKU-RICE-10KG", "quantity": 1},
		},
	},
	// amountFen is an int64, which protojson writes as a string.
	"CreatePayment": map[string]any{"orderCode": "SO-1001", "amountFen": "1999", "description": "tea and rice"},
}

// notifyOperation describes POST /v1/payments/notify, the provider's
// callback (served outside grpc-gateway: its signature covers the raw
// body).
func notifyOperation() map[string]any {
	header := func(name, desc string) map[string]any {
		return map[string]any{"name": name, "in": "header", "required": true, "description": desc, "schema": map[string]any{"type": "string"}}
	}
	plain := func(desc string) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{
			"schema": map[string]any{"type": "object", "properties": map[string]any{"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"}}},
		}}}
	}
	str := map[string]any{"type": "string"}
	return map[string]any{
		"operationId": "PaymentCallback_Notify",
		"tags":        []any{"PaymentCallback"},
		"summary":     "The payment provider's payment notification (WeChat Pay API v3).",
		"description": "Verified with the provider's key named by Wechatpay-Serial and a 5-minute timestamp window, the resource decrypted with the APIv3 key; it must name this merchant's mchid and appid, CNY and TRANSACTION.SUCCESS. An applied notification id is remembered for 48 h: a replay is answered 204 and not applied again.",
		"security":    []any{map[string]any{SchemeProviderSignature: []any{}}},
		"parameters": []any{
			header("Wechatpay-Timestamp", "Unix seconds; within 5 minutes of the gateway's clock."),
			header("Wechatpay-Nonce", "The signature's nonce."),
			header("Wechatpay-Serial", "The serial (or PUB_KEY_ID_…) of the key that signed."),
		},
		"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{
			"schema": map[string]any{"type": "object", "required": []any{"id", "event_type", "resource"}, "properties": map[string]any{
				"id": str, "create_time": str, "event_type": str, "resource_type": str, "summary": str,
				"resource": map[string]any{"type": "object", "properties": map[string]any{
					"algorithm": map[string]any{"type": "string", "const": "AEAD_AES_256_GCM"}, "ciphertext": str,
					"associated_data": str, "nonce": str, "original_type": str,
				}},
			}},
		}}},
		"responses": map[string]any{
			"204": map[string]any{"description": "Applied, or a replay of one applied before."},
			"400": plain("Malformed, another merchant, currency or event, or an amount other than the placed one."),
			"401": plain("Missing, forged or stale signature, or an unknown key serial."),
			"404": plain("No such payment."),
			"409": plain("The payment is closed: it conflicts with the notification."),
			"413": plain("Body over 64 KiB."),
			"503": plain("The reconciler cannot be reached; the provider retries."),
		},
	}
}

// pruneSchemas drops the schemas nothing refers to (the generated
// response wrappers whose field is the answer's body): the ones the paths
// and responses use, and those they use in turn, stay.
func pruneSchemas(schemas map[string]any, roots ...any) {
	used := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				if ref, ok := e.(string); ok && k == "$ref" {
					name, found := strings.CutPrefix(ref, "#/components/schemas/")
					if found && !used[name] {
						used[name] = true
						walk(schemas[name])
					}
					continue
				}
				walk(e)
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	for _, r := range roots {
		walk(r)
	}
	for name := range schemas {
		if !used[name] {
			delete(schemas, name)
		}
	}
}

// bodyLimitDescription is the description of the generated 413 answer.
func bodyLimitDescription(paths map[string]any) string {
	for _, item := range paths {
		methods, _ := item.(map[string]any)
		for _, o := range methods {
			op, _ := o.(map[string]any)
			resp, _ := op["responses"].(map[string]any)
			if r, ok := resp["413"].(map[string]any); ok {
				d, _ := r["description"].(string)
				return d
			}
		}
	}
	return ""
}

// errorRefs are the shared error responses of the given statuses.
func errorRefs(statuses ...int) map[string]any {
	out := map[string]any{}
	for _, s := range statuses {
		out[fmt.Sprint(s)] = map[string]any{"$ref": "#/components/responses/" + errorAnswers[s].name}
	}
	return out
}

// qrOperation describes GET /v1/payments/{orderCode}/qr (served outside
// grpc-gateway: it answers a PNG).
func qrOperation() map[string]any {
	responses := errorRefs(400, 401, 404, 429, 500, 503)
	responses["200"] = map[string]any{
		"description": "The payment's codeUrl as a 256 px QR code.",
		"content":     map[string]any{"image/png": map[string]any{"schema": map[string]any{"type": "string", "contentMediaType": "image/png"}}},
	}
	return map[string]any{
		"operationId": "PaymentService_GetPaymentQR",
		"tags":        []any{"PaymentService"},
		"summary":     "The caller's payment's code_url as a QR code image.",
		"parameters": []any{map[string]any{
			"name": "orderCode", "in": "path", "required": true, "description": "The order code the payment was placed with.",
			"schema": map[string]any{"type": "string"},
		}},
		"responses": responses,
	}
}

// devLoginOperation describes POST /v1/dev/login, served only with
// ORDERFLOW_DEV_LOGIN=true (which production refuses).
func devLoginOperation() map[string]any {
	str := map[string]any{"type": "string"}
	responses := errorRefs(400, 413, 500)
	responses["200"] = map[string]any{"description": "A 12-hour token.", "content": map[string]any{"application/json": map[string]any{
		"schema": map[string]any{"type": "object", "properties": map[string]any{
			"memberId": str, "token": str, "expireTime": map[string]any{"type": "string", "format": "date-time"},
		}},
	}}}
	responses["404"] = map[string]any{"description": "Dev login is off (ORDERFLOW_DEV_LOGIN is not true)."}
	return map[string]any{
		"operationId": "DevLogin_Login",
		"tags":        []any{"DevLogin"},
		"summary":     "Development only: a token for any member id with the roles asked for.",
		"description": "Served only with ORDERFLOW_DEV_LOGIN=true, which make run sets and production refuses.",
		"security":    []any{},
		"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{
			"schema": map[string]any{"type": "object", "required": []any{"memberId"}, "properties": map[string]any{
				"memberId": map[string]any{"type": "string", "minLength": 1, "maxLength": 64},
				"roles":    map[string]any{"type": "array", "maxItems": 8, "items": str},
			}},
			"example": map[string]any{"memberId": "demo", "roles": []any{"admin"}},
		}}},
		"responses": responses,
	}
}
