package wechatpay

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// AuthScheme is the scheme of the Authorization header of API v3 requests.
const AuthScheme = "WECHATPAY2-SHA256-RSA2048"

// Headers the provider sets on its notifications (and responses).
const (
	HeaderTimestamp = "Wechatpay-Timestamp"
	HeaderNonce     = "Wechatpay-Nonce"
	HeaderSignature = "Wechatpay-Signature"
	HeaderSerial    = "Wechatpay-Serial"
)

// ErrBadSignature means a signature is missing, malformed, does not verify,
// or its timestamp is outside the accepted window.
var ErrBadSignature = errors.New("wechatpay: bad signature")

// Sign returns the base64 RSA-SHA256 (PKCS #1 v1.5) signature of message.
func Sign(key *rsa.PrivateKey, message string) (string, error) {
	sum := sha256.Sum256([]byte(message))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("wechatpay: sign: %w", err)
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// Verify checks a base64 RSA-SHA256 signature of message.
func Verify(pub *rsa.PublicKey, message, signature string) error {
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return fmt.Errorf("%w: signature is not base64", ErrBadSignature)
	}
	sum := sha256.Sum256([]byte(message))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	return nil
}

// RequestMessage is what a merchant signs for a request:
// "METHOD\nURL\ntimestamp\nnonce\nbody\n", URL being the path with its query.
func RequestMessage(method, pathAndQuery string, timestamp int64, nonce string, body []byte) string {
	return method + "\n" + pathAndQuery + "\n" + strconv.FormatInt(timestamp, 10) + "\n" + nonce + "\n" + string(body) + "\n"
}

// NotifyMessage is what the provider signs for a notification or response:
// "timestamp\nnonce\nbody\n".
func NotifyMessage(timestamp, nonce string, body []byte) string {
	return timestamp + "\n" + nonce + "\n" + string(body) + "\n"
}

// NewNonce returns a random 32-character nonce.
func NewNonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("wechatpay: read random: %v", err))
	}
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

// Authorization holds the fields of a request's Authorization header.
type Authorization struct {
	MchID     string
	Nonce     string
	Signature string
	Timestamp int64
	SerialNo  string
}

// String formats the header value.
func (a Authorization) String() string {
	return fmt.Sprintf(`%s mchid="%s",nonce_str="%s",signature="%s",timestamp="%d",serial_no="%s"`,
		AuthScheme, a.MchID, a.Nonce, a.Signature, a.Timestamp, a.SerialNo)
}

// SignRequest builds the Authorization header value for a request.
func SignRequest(key *rsa.PrivateKey, mchID, serialNo, method, pathAndQuery string, body []byte, now time.Time) (string, error) {
	a := Authorization{MchID: mchID, Nonce: NewNonce(), Timestamp: now.Unix(), SerialNo: serialNo}
	sig, err := Sign(key, RequestMessage(method, pathAndQuery, a.Timestamp, a.Nonce, body))
	if err != nil {
		return "", err
	}
	a.Signature = sig
	return a.String(), nil
}

// ParseAuthorization parses an Authorization header value.
func ParseAuthorization(h string) (Authorization, error) {
	var a Authorization
	rest, ok := strings.CutPrefix(h, AuthScheme+" ")
	if !ok {
		return a, fmt.Errorf("%w: scheme is not %s", ErrBadSignature, AuthScheme)
	}
	for field := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			return a, fmt.Errorf("%w: malformed field %q", ErrBadSignature, field)
		}
		v = strings.Trim(v, `"`)
		switch k {
		case "mchid":
			a.MchID = v
		case "nonce_str":
			a.Nonce = v
		case "signature":
			a.Signature = v
		case "timestamp":
			ts, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return a, fmt.Errorf("%w: timestamp %q", ErrBadSignature, v)
			}
			a.Timestamp = ts
		case "serial_no":
			a.SerialNo = v
		}
	}
	if a.MchID == "" || a.Nonce == "" || a.Signature == "" || a.Timestamp == 0 {
		return a, fmt.Errorf("%w: incomplete authorization", ErrBadSignature)
	}
	return a, nil
}

// VerifyRequest checks a request's Authorization header against the
// merchant's public key, its timestamp within window of now. It returns the
// parsed header (for the mchid).
func VerifyRequest(pub *rsa.PublicKey, header, method, pathAndQuery string, body []byte, now time.Time, window time.Duration) (Authorization, error) {
	a, err := ParseAuthorization(header)
	if err != nil {
		return a, err
	}
	if err := checkWindow(time.Unix(a.Timestamp, 0), now, window); err != nil {
		return a, err
	}
	return a, Verify(pub, RequestMessage(method, pathAndQuery, a.Timestamp, a.Nonce, body), a.Signature)
}

func checkWindow(ts, now time.Time, window time.Duration) error {
	if d := now.Sub(ts); d > window || d < -window {
		return fmt.Errorf("%w: timestamp %s is more than %s from now", ErrBadSignature, ts.UTC().Format(time.RFC3339), window)
	}
	return nil
}
