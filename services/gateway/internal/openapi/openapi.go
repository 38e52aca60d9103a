// Package openapi embeds the gateway's generated OpenAPI v2 document
// (orderflow.swagger.json, written by `make generate`).
package openapi

import _ "embed"

// Document is the OpenAPI v2 document of the gateway's REST API.
//
//go:embed orderflow.swagger.json
var Document []byte
