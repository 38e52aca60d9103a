// Package ops implements the gateway's operations API
// (orderflow.ops.v1.OpsService): the overview of the job queue, tasks in
// flight and the running pool; finding, retrying, failing and cancelling
// any member's task; listing, replaying and discarding dead letters; the
// running pool's holders and waiters, its capacity and the release of a
// dead holder; a member's payment and its tracking. Every call needs the
// admin role or the service-to-service token; every mutation is logged
// with its actor and recorded in the audit stream.
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/engine/inflight"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/clock"
)

// Publisher sends a message and waits for the broker's confirm.
type Publisher interface {
	Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error
}

// Channels opens AMQP channels (to read queue counts).
type Channels interface {
	Channel() (*amqp.Channel, error)
}

// Authenticator checks that the caller holds a role.
type Authenticator interface {
	RequireRole(ctx context.Context, role string) (context.Context, error)
}

// SlotPool is the split-workers' running pool as the operations API sees
// it: a *slotpool.Pool, or a *slotpool.Sharded, whose snapshot sums its
// shards, whose capacity is split over them and whose evictions go to the
// shard holding the token.
type SlotPool interface {
	Snapshot(ctx context.Context) (slotpool.Snapshot, error)
	Finished(ctx context.Context, count int) ([]slotpool.Finished, error)
	SetCapacity(ctx context.Context, n int) error
	ResetToConfiguration(ctx context.Context, cfg slotpool.Settings) error
	Evict(ctx context.Context, token, detail string) error
}

// Options are the Server's dependencies.
type Options struct {
	Store    *taskstore.Store
	Pub      Publisher
	Channels Channels
	Queue    jobqueue.Names
	Pool     SlotPool
	// PoolConfig is the split-workers' configured settings of the pool,
	// which ResetSlotPoolToConfiguration writes; nil when the gateway is
	// not told them (the reset is then refused).
	PoolConfig *slotpool.Settings
	// Reconciler answers payment calls (with the service token).
	Reconciler reconcilerv1.ReconcilerServiceClient
	Authn      Authenticator
	Audit      *Audit
	Log        *slog.Logger
	Clock      clock.Clock
	// OutboxGrace is how long a replayed job waits for its confirm before
	// the outbox sweeper republishes it.
	OutboxGrace time.Duration
	// Events reads the split-workers' cluster-wide event counts (the
	// error rates); nil leaves them out of the overview.
	Events *eventrate.Counter
	// InFlight reads the split-workers' reports of the deliveries they
	// hold unacknowledged; nil leaves the unacknowledged counts out.
	InFlight *inflight.Board
}

// Server serves OpsService.
type Server struct {
	opsv1.UnimplementedOpsServiceServer
	o Options
}

var _ opsv1.OpsServiceServer = (*Server)(nil)

// New returns a Server.
func New(o Options) *Server {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.OutboxGrace <= 0 {
		o.OutboxGrace = 30 * time.Second
	}
	return &Server{o: o}
}

// actor authorises the caller, a person with the admin role (no
// service's token is an admin credential), and names them for the log and
// the audit by their member id.
func (s *Server) actor(ctx context.Context) (string, error) {
	ctx, err := s.o.Authn.RequireRole(ctx, auth.RoleAdmin)
	if err != nil {
		return "", err
	}
	id, _ := auth.IdentityFrom(ctx)
	return id.Member, nil
}

// Bounds of an audit event's fields (bytes): a longer value is cut.
const (
	maxAuditTarget = 256
	maxAuditDetail = 4096
	maxAuditResult = 1024
)

// mutate authorises, validates the request (valid, may be nil; a refusal
// is answered and neither logged nor audited), runs fn, logs the outcome
// with the actor and records it in the audit stream, its target, detail
// and result cut to their bounds. A mutation whose audit record cannot be
// written still happened; the failure is logged.
func (s *Server) mutate(ctx context.Context, action, target string, req proto.Message, valid func() error, fn func(ctx context.Context) error) error {
	actor, err := s.actor(ctx)
	if err != nil {
		return err
	}
	if valid != nil {
		if err := valid(); err != nil {
			return err
		}
	}
	detail, _ := protojson.Marshal(req)
	err = fn(slotpool.WithActor(ctx, actor))
	result := "ok"
	if err != nil {
		result = status.Convert(err).Message()
	}
	target, result = clip(target, maxAuditTarget), clip(result, maxAuditResult)
	log := s.o.Log.With("actor", actor, "action", action, "target", target, "detail", clip(string(detail), maxAuditDetail), "result", result)
	if err != nil {
		log.WarnContext(ctx, "operator action failed")
	} else {
		log.InfoContext(ctx, "operator action")
	}
	e := &opsv1.AuditEvent{Time: timestamppb.New(s.o.Clock.Now()), Actor: actor, Action: action, Target: target, Detail: clip(string(detail), maxAuditDetail), Result: result}
	if aerr := s.o.Audit.Record(context.WithoutCancel(ctx), e); aerr != nil {
		log.ErrorContext(ctx, "audit record lost", "err", aerr)
	}
	return err
}

// clip cuts v to at most n bytes, on a rune boundary, ending it with "…"
// when it was cut.
func clip(v string, n int) string {
	if len(v) <= n {
		return v
	}
	const more = "…"
	i := n - len(more)
	for i > 0 && !utf8.RuneStart(v[i]) {
		i--
	}
	return v[:i] + more
}

// storeErr maps task-store errors to API errors.
func (s *Server) storeErr(ctx context.Context, err error) error {
	var claimed *taskstore.ClaimedError
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		return apierr.New(codes.NotFound, apierr.ReasonTaskNotFound, "task does not exist")
	case errors.Is(err, taskstore.ErrExpired):
		return apierr.New(codes.NotFound, apierr.ReasonTaskExpired, "task has expired")
	case errors.Is(err, taskstore.ErrTerminal):
		return apierr.New(codes.FailedPrecondition, apierr.ReasonTaskFinished, "task has already finished")
	case errors.As(err, &claimed):
		return apierr.New(codes.FailedPrecondition, apierr.ReasonOrderCodeClaimed,
			fmt.Sprintf("order code %s is held by task %s (the order was submitted again), so replaying this task would ship it twice; discard this dead letter", claimed.OrderCode, claimed.Holder),
			"orderCode", claimed.OrderCode, "holderTaskId", claimed.Holder)
	case errors.Is(err, taskstore.ErrNotFailed):
		return apierr.New(codes.FailedPrecondition, apierr.ReasonTaskFinished, "task is not FAILED, so there is nothing to replay")
	case errors.Is(err, errBadToken):
		return apierr.Field("pageToken", "is not a token returned by a previous page")
	case status.Code(err) != codes.Unknown:
		return err
	}
	s.o.Log.ErrorContext(ctx, "operations: store unavailable", "err", err)
	return apierr.New(codes.Unavailable, apierr.ReasonStoreUnavailable, "the task store is unavailable, please retry later")
}

func pageSize(n int32, def, max int) (int, error) {
	switch {
	case n < 0 || int(n) > max:
		return 0, apierr.Field("pageSize", fmt.Sprintf("must be between 0 and %d", max))
	case n == 0:
		return def, nil
	}
	return int(n), nil
}

func offsetToken(tok string) (int, error) {
	if tok == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(tok)
	if err != nil || n < 0 {
		return 0, apierr.Field("pageToken", "is not a token returned by a previous page")
	}
	return n, nil
}

func ref(member, id string) error {
	if !auth.ValidMemberID(member) {
		return apierr.Field("memberId", "must be a member id")
	}
	if !taskstore.ValidID(id) {
		return apierr.Field("taskId", "must be a task id (22 base64url characters)")
	}
	return nil
}
