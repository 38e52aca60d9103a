package smoke

import (
	"context"
	"fmt"
	"io"
	"time"

	paymentv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/payment/v1"
)

// Steps runs named steps in order, printing each with its start time and
// duration, and stops at the first failure.
type Steps struct {
	// Out receives one line per step.
	Out io.Writer
	// Now is the clock; nil means time.Now.
	Now   func() time.Time
	start time.Time
}

// Run runs one step and reports its error, prefixed with the step's name.
func (s *Steps) Run(name string, fn func() error) error {
	now := s.Now
	if now == nil {
		now = time.Now
	}
	t0 := now()
	if s.start.IsZero() {
		s.start = t0
	}
	fmt.Fprintf(s.Out, "%s +%6.1fs  %s ...\n", t0.UTC().Format("15:04:05.000"), t0.Sub(s.start).Seconds(), name)
	err := fn()
	d := now().Sub(t0)
	if err != nil {
		fmt.Fprintf(s.Out, "%s +%6.1fs  %s FAILED after %.1fs: %v\n", now().UTC().Format("15:04:05.000"), now().Sub(s.start).Seconds(), name, d.Seconds(), err)
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(s.Out, "%s +%6.1fs  %s ok (%.1fs)\n", now().UTC().Format("15:04:05.000"), now().Sub(s.start).Seconds(), name, d.Seconds())
	return nil
}

// Elapsed is the time since the first step started.
func (s *Steps) Elapsed() time.Duration {
	now := s.Now
	if now == nil {
		now = time.Now
	}
	return now().Sub(s.start)
}

// Options configure Run.
type Options struct {
	// Gateway is the gateway's HTTP base URL.
	Gateway string
	// JWTSecret, Issuer and Audience sign the member token.
	JWTSecret        []byte
	Issuer, Audience string
	// RunID makes the order codes of this run unique.
	RunID string
	// OrderTimeout bounds the wait for the sample order (default 1m).
	OrderTimeout time.Duration
	// PaymentTimeout bounds the wait for the unpaid payment to close
	// (default 2m; the release's reconcile schedule must end before).
	PaymentTimeout time.Duration
	// SkipPayment leaves out the unpaid payment (a release whose reconcile
	// schedule takes longer than a test should).
	SkipPayment bool
}

// Run is the smoke against a running release: a member token, the sample
// order to SUCCEEDED with its shipments and item failures, and a payment
// nobody pays to CLOSED (on the release's reconcile schedule).
func Run(ctx context.Context, steps *Steps, opts Options) error {
	if opts.OrderTimeout <= 0 {
		opts.OrderTimeout = time.Minute
	}
	if opts.PaymentTimeout <= 0 {
		opts.PaymentTimeout = 2 * time.Minute
	}
	c := &Client{Gateway: opts.Gateway}
	if err := steps.Run("token", func() error {
		tok, err := Token(opts.JWTSecret, opts.Issuer, opts.Audience, time.Now())
		c.Token = tok
		return err
	}); err != nil {
		return err
	}
	if err := steps.Run("sample order to SUCCEEDED with 2 shipments and 2 item failures", func() error {
		return c.SampleOrderSucceeds(ctx, "SMOKE-"+opts.RunID+"-1", opts.OrderTimeout)
	}); err != nil {
		return err
	}
	if opts.SkipPayment {
		return nil
	}
	return steps.Run("never-paid payment to CLOSED", func() error {
		return c.UnpaidPaymentCloses(ctx, "SMOKE-"+opts.RunID+"-PAY", opts.PaymentTimeout)
	})
}

// SampleOrderSucceeds submits the sample order under orderCode and checks
// its result.
func (c *Client) SampleOrderSucceeds(ctx context.Context, orderCode string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t, err := c.SubmitOrder(ctx, SampleOrder(orderCode))
	if err != nil {
		return err
	}
	if t, err = c.WaitTask(ctx, t.GetTaskId()); err != nil {
		return err
	}
	return CheckSample(t)
}

// UnpaidPaymentCloses places a payment nobody pays and waits until the
// reconciler has closed it, with at least one query before the close.
func (c *Client) UnpaidPaymentCloses(ctx context.Context, orderCode string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := c.CreatePayment(ctx, orderCode, 1999)
	if err != nil {
		return err
	}
	if p.GetCodeUrl() == "" {
		return fmt.Errorf("payment %s has no code_url", orderCode)
	}
	if p, err = c.WaitPayment(ctx, orderCode, paymentv1.PaymentStatus_PAYMENT_STATUS_CLOSED); err != nil {
		return err
	}
	if len(p.GetAttempts()) < 2 {
		return fmt.Errorf("payment %s closed after %d attempts, want queries before the close", orderCode, len(p.GetAttempts()))
	}
	return nil
}
