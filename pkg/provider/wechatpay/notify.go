package wechatpay

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Notification event and resource constants.
const (
	EventTransactionSuccess = "TRANSACTION.SUCCESS"
	ResourceTypeEncrypted   = "encrypt-resource"
	AlgorithmAEADAES256GCM  = "AEAD_AES_256_GCM"
	OriginalTypeTransaction = "transaction"
	// APIv3KeySize is the length of the APIv3 key in bytes.
	APIv3KeySize = 32
)

// ErrBadNotification means a notification is malformed or its resource
// cannot be decrypted.
var ErrBadNotification = errors.New("wechatpay: bad notification")

// Notification is the body of a payment notification.
type Notification struct {
	ID           string   `json:"id"`
	CreateTime   string   `json:"create_time"`
	EventType    string   `json:"event_type"`
	ResourceType string   `json:"resource_type"`
	Resource     Resource `json:"resource"`
	Summary      string   `json:"summary"`
}

// Resource is an AES-256-GCM encrypted payload (notification resources and
// platform certificates).
type Resource struct {
	Algorithm      string `json:"algorithm"`
	Ciphertext     string `json:"ciphertext"`
	AssociatedData string `json:"associated_data"`
	Nonce          string `json:"nonce"`
	OriginalType   string `json:"original_type,omitempty"`
}

// Encrypt seals plaintext with the APIv3 key under a fresh 12-character
// nonce.
func Encrypt(apiV3Key []byte, associatedData string, plaintext []byte) (Resource, error) {
	aead, err := newGCM(apiV3Key)
	if err != nil {
		return Resource{}, err
	}
	nonce := NewNonce()[:12]
	ct := aead.Seal(nil, []byte(nonce), plaintext, []byte(associatedData))
	return Resource{
		Algorithm:      AlgorithmAEADAES256GCM,
		Ciphertext:     base64.StdEncoding.EncodeToString(ct),
		AssociatedData: associatedData,
		Nonce:          nonce,
	}, nil
}

// Decrypt opens r with the APIv3 key.
func Decrypt(apiV3Key []byte, r Resource) ([]byte, error) {
	if r.Algorithm != AlgorithmAEADAES256GCM {
		return nil, fmt.Errorf("%w: algorithm %q", ErrBadNotification, r.Algorithm)
	}
	aead, err := newGCM(apiV3Key)
	if err != nil {
		return nil, err
	}
	ct, err := base64.StdEncoding.DecodeString(r.Ciphertext)
	if err != nil {
		return nil, fmt.Errorf("%w: ciphertext is not base64", ErrBadNotification)
	}
	if len(r.Nonce) != aead.NonceSize() {
		return nil, fmt.Errorf("%w: nonce must be %d bytes", ErrBadNotification, aead.NonceSize())
	}
	pt, err := aead.Open(nil, []byte(r.Nonce), ct, []byte(r.AssociatedData))
	if err != nil {
		return nil, fmt.Errorf("%w: decrypt: %w", ErrBadNotification, err)
	}
	return pt, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	if len(key) != APIv3KeySize {
		return nil, fmt.Errorf("wechatpay: APIv3 key must be %d bytes, got %d", APIv3KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("wechatpay: %w", err)
	}
	return cipher.NewGCM(block)
}

// SignedNotification is a notification ready to be POSTed: its body and the
// Wechatpay-* headers.
type SignedNotification struct {
	Body   []byte
	Header http.Header
}

// BuildNotification encrypts tx into a TRANSACTION.SUCCESS notification with
// the given id and signs it with the platform key (the provider's side).
func BuildNotification(id string, tx Transaction, platformKey *rsa.PrivateKey, platformSerial string, apiV3Key []byte, now time.Time) (SignedNotification, error) {
	plain, err := json.Marshal(tx)
	if err != nil {
		return SignedNotification{}, fmt.Errorf("wechatpay: marshal transaction: %w", err)
	}
	res, err := Encrypt(apiV3Key, OriginalTypeTransaction, plain)
	if err != nil {
		return SignedNotification{}, err
	}
	res.OriginalType = OriginalTypeTransaction
	n := Notification{
		ID:           id,
		CreateTime:   now.Format(time.RFC3339),
		EventType:    EventTransactionSuccess,
		ResourceType: ResourceTypeEncrypted,
		Resource:     res,
		Summary:      "支付成功",
	}
	body, err := json.Marshal(n)
	if err != nil {
		return SignedNotification{}, fmt.Errorf("wechatpay: marshal notification: %w", err)
	}
	h, err := SignResponse(platformKey, platformSerial, body, now)
	if err != nil {
		return SignedNotification{}, err
	}
	return SignedNotification{Body: body, Header: h}, nil
}

// SignResponse returns the Wechatpay-* headers that sign body with the
// platform key.
func SignResponse(platformKey *rsa.PrivateKey, platformSerial string, body []byte, now time.Time) (http.Header, error) {
	ts := strconv.FormatInt(now.Unix(), 10)
	nonce := NewNonce()
	sig, err := Sign(platformKey, NotifyMessage(ts, nonce, body))
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderNonce, nonce)
	h.Set(HeaderSignature, sig)
	h.Set(HeaderSerial, platformSerial)
	return h, nil
}

// VerifySignature checks the Wechatpay-* signature headers of a provider
// notification or response over body, with a timestamp within window of
// now.
func VerifySignature(header http.Header, body []byte, platformPub *rsa.PublicKey, now time.Time, window time.Duration) error {
	ts, nonce, sig := header.Get(HeaderTimestamp), header.Get(HeaderNonce), header.Get(HeaderSignature)
	if ts == "" || nonce == "" || sig == "" {
		return fmt.Errorf("%w: missing Wechatpay signature headers", ErrBadSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q", ErrBadSignature, ts)
	}
	if err := checkWindow(time.Unix(sec, 0), now, window); err != nil {
		return err
	}
	return Verify(platformPub, NotifyMessage(ts, nonce, body), sig)
}

// VerifyNotification checks a notification's signature (platform key,
// timestamp within window of now), decrypts its resource with the APIv3 key
// and returns the transaction it reports. Errors wrap ErrBadSignature
// (reject as unauthenticated) or ErrBadNotification (malformed).
func VerifyNotification(header http.Header, body []byte, platformPub *rsa.PublicKey, apiV3Key []byte, now time.Time, window time.Duration) (Transaction, error) {
	if err := VerifySignature(header, body, platformPub, now, window); err != nil {
		return Transaction{}, err
	}
	var n Notification
	if err := json.Unmarshal(body, &n); err != nil {
		return Transaction{}, fmt.Errorf("%w: %w", ErrBadNotification, err)
	}
	if n.ResourceType != ResourceTypeEncrypted {
		return Transaction{}, fmt.Errorf("%w: resource_type %q", ErrBadNotification, n.ResourceType)
	}
	plain, err := Decrypt(apiV3Key, n.Resource)
	if err != nil {
		return Transaction{}, err
	}
	var tx Transaction
	if err := json.Unmarshal(plain, &tx); err != nil {
		return Transaction{}, fmt.Errorf("%w: transaction: %w", ErrBadNotification, err)
	}
	if tx.OutTradeNo == "" {
		return Transaction{}, fmt.Errorf("%w: transaction without out_trade_no", ErrBadNotification)
	}
	return tx, nil
}
