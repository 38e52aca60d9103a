// Package fulfilmentsim simulates the fulfilment system (the legacy
// warehouse management system) behind the wire contract of package
// fulfilment: a catalogue with stock, members with unpaid bills, and
// shipment jobs that run remotely for a random time and end COMPLETED or
// ERROR. At most Capacity jobs run at once; a request beyond that is
// refused with 429. It counts what tests assert on (concurrent jobs,
// duplicates, rejections) and has admin calls to reset and reconfigure it.
//
// Jobs need no background goroutine: a job's end time is fixed when it is
// accepted, and every request first settles the jobs whose end time has
// passed, so counters are exact at every observation and time can be faked
// with a clock.Fake.
package fulfilmentsim

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
)

// Options configure a Server.
type Options struct {
	// Capacity is the number of jobs that may run at once (4 when zero).
	Capacity int
	// MinDuration and MaxDuration bound a job's random running time; a
	// job drawn 0 has ended when its create answers (COMPLETED or ERROR).
	MinDuration, MaxDuration time.Duration
	// ErrorRate is the probability that a job ends in ERROR.
	ErrorRate float64
	// Catalogue is the initial catalogue; DefaultCatalogue when nil.
	Catalogue *fulfilment.Catalogue
	// Clock tells the time; the wall clock when nil.
	Clock clock.Clock
	// Seed seeds job durations and errors; random when zero.
	Seed uint64
}

// Server is the simulated fulfilment system. It is an http.Handler.
type Server struct {
	clock   clock.Clock
	mux     *http.ServeMux
	journal io.Writer

	mu          sync.Mutex
	rnd         *rand.Rand
	cfg         config
	initial     fulfilment.Catalogue
	skus        map[string]*fulfilment.SKU
	warehouses  map[string]bool
	unpaid      map[string]bool
	jobs        map[string]*job
	byKey       map[string]*job
	running     map[string]*job
	stats       fulfilment.Stats
	seq         int
	failCatalog int
}

type config struct {
	capacity int
	min, max time.Duration
	errRate  float64
}

type job struct {
	fulfilment.Job
	warehouse string
	lines     []fulfilment.ShipmentLine
	endAt     time.Time
	fails     bool
}

// New returns a simulator with opts.
func New(opts Options) *Server {
	if opts.Capacity <= 0 {
		opts.Capacity = 4
	}
	if opts.MaxDuration < opts.MinDuration {
		opts.MaxDuration = opts.MinDuration
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	cat := DefaultCatalogue()
	if opts.Catalogue != nil {
		cat = cloneCatalogue(*opts.Catalogue)
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s := &Server{
		clock:   opts.Clock,
		rnd:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		cfg:     config{capacity: opts.Capacity, min: opts.MinDuration, max: opts.MaxDuration, errRate: opts.ErrorRate},
		initial: cat,
		jobs:    make(map[string]*job),
	}
	s.resetLocked()
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /catalogue", s.getCatalogue)
	s.mux.HandleFunc("GET /members/{memberId}", s.getMember)
	s.mux.HandleFunc("POST /shipments", s.createShipment)
	s.mux.HandleFunc("GET /shipments/{jobId}", s.getShipment)
	s.mux.HandleFunc("GET /stats", s.getStats)
	s.mux.HandleFunc("POST /admin/reset", s.reset)
	s.mux.HandleFunc("PUT /admin/config", s.putConfig)
	s.mux.HandleFunc("PUT /admin/catalogue", s.putCatalogue)
	s.mux.HandleFunc("POST /admin/fail-catalogue", s.failCatalogue)
	return s
}

// DefaultCatalogue is the built-in catalogue: three warehouses, ten SKUs
// (two with low stock, one too heavy for any parcel, two that need a
// settled bill) and the member "member-unpaid" with an unpaid bill.
func DefaultCatalogue() fulfilment.Catalogue {
	return fulfilment.Catalogue{
		SKUs: []fulfilment.SKU{
			{SKU: "SKU-TEA-500G", Warehouse: "WH-SHANGHAI", Stock: 500, WeightGrams: 500},
			{SKU: "SKU-MUG", Warehouse: "WH-SHANGHAI", Stock: 200, WeightGrams: 400},
			{SKU: "SKU-KETTLE", Warehouse: "WH-SHANGHAI", Stock: 50, WeightGrams: 1500},
			{SKU: "SKU-LAST-ONE", Warehouse: "WH-SHANGHAI", Stock: 1, WeightGrams: 300},
			{SKU: "SKU-GIFT-CARD", Warehouse: "WH-SHANGHAI", Stock: 1000, WeightGrams: 20, SettlementRequired: true},
			{SKU: "SKU-RICE-10KG", Warehouse: "WH-BEIJING", Stock: 300, WeightGrams: 10000},
			{SKU: "SKU-OIL-5L", Warehouse: "WH-BEIJING", Stock: 300, WeightGrams: 4600},
			{SKU: "SKU-PHONE", Warehouse: "WH-BEIJING", Stock: 3, WeightGrams: 200, SettlementRequired: true},
			{SKU: "SKU-DESK", Warehouse: "WH-GUANGZHOU", Stock: 20, WeightGrams: 18000},
			{SKU: "SKU-SOFA", Warehouse: "WH-GUANGZHOU", Stock: 5, WeightGrams: 45000},
		},
		UnpaidMembers: []string{"member-unpaid"},
	}
}

func cloneCatalogue(c fulfilment.Catalogue) fulfilment.Catalogue {
	return fulfilment.Catalogue{SKUs: slices.Clone(c.SKUs), UnpaidMembers: slices.Clone(c.UnpaidMembers)}
}

// resetLocked restores stock from the initial catalogue and clears jobs and
// counters. Job ids keep counting so that ids are never reused.
func (s *Server) resetLocked() {
	s.skus = make(map[string]*fulfilment.SKU, len(s.initial.SKUs))
	s.warehouses = make(map[string]bool)
	for _, k := range s.initial.SKUs {
		s.skus[k.SKU] = &k
		s.warehouses[k.Warehouse] = true
	}
	s.unpaid = make(map[string]bool, len(s.initial.UnpaidMembers))
	for _, m := range s.initial.UnpaidMembers {
		s.unpaid[m] = true
	}
	s.jobs = make(map[string]*job)
	s.byKey = make(map[string]*job)
	s.running = make(map[string]*job)
	s.stats = fulfilment.Stats{}
	s.failCatalog = 0
}

// settleLocked ends the running jobs whose time is up.
func (s *Server) settleLocked() {
	now := s.clock.Now()
	for _, j := range s.running {
		if !j.endAt.After(now) {
			s.endLocked(j)
		}
	}
}

// endLocked ends running job j: completed, or failed (its stock put back).
func (s *Server) endLocked(j *job) {
	delete(s.running, j.JobID)
	if j.fails {
		j.State = fulfilment.JobError
		j.ErrorCode = "WMS_JOB_FAILED"
		j.ErrorMsg = "the warehouse could not pick the shipment"
		s.stats.Failed++
		for _, l := range j.lines {
			s.skus[l.SKU].Stock += l.Quantity
		}
		return
	}
	j.State = fulfilment.JobCompleted
	j.ShipmentID = "SHP-" + j.JobID[len("job-"):]
	s.stats.Completed++
}

// ServeHTTP serves the fulfilment API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats returns the counters.
func (s *Server) Stats() fulfilment.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	st := s.stats
	st.Capacity = s.cfg.capacity
	st.Running = len(s.running)
	return st
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, fulfilment.ErrorBody{Error: code, Message: msg})
}

func (s *Server) getCatalogue(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	if s.failCatalog > 0 {
		s.failCatalog--
		s.mu.Unlock()
		writeError(w, http.StatusInternalServerError, "INTERNAL", "catalogue temporarily unavailable")
		return
	}
	s.settleLocked()
	cat := fulfilment.Catalogue{SKUs: make([]fulfilment.SKU, 0, len(s.skus)), UnpaidMembers: []string{}}
	for _, k := range s.initial.SKUs {
		cat.SKUs = append(cat.SKUs, *s.skus[k.SKU])
	}
	for m := range s.unpaid {
		cat.UnpaidMembers = append(cat.UnpaidMembers, m)
	}
	s.mu.Unlock()
	slices.Sort(cat.UnpaidMembers)
	writeJSON(w, http.StatusOK, cat)
}

func (s *Server) getMember(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("memberId")
	s.mu.Lock()
	unpaid := s.unpaid[id]
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, fulfilment.Member{MemberID: id, BillUnpaid: unpaid})
}

func (s *Server) createShipment(w http.ResponseWriter, r *http.Request) {
	var req fulfilment.ShipmentRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fulfilment.CodeBadRequest, "malformed body: "+err.Error())
		return
	}
	if req.IdempotencyKey == "" || req.Warehouse == "" || len(req.Lines) == 0 {
		writeError(w, http.StatusBadRequest, fulfilment.CodeBadRequest, "idempotencyKey, warehouse and lines are required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked()
	if j, ok := s.byKey[req.IdempotencyKey]; ok {
		s.stats.Duplicates++
		writeJSON(w, http.StatusOK, j.Job)
		return
	}
	if code, msg := s.checkLocked(req); code != "" {
		writeError(w, http.StatusConflict, code, msg)
		return
	}
	if len(s.running) >= s.cfg.capacity {
		s.stats.RejectedOverCapacity++
		writeError(w, http.StatusTooManyRequests, fulfilment.CodeOverCapacity, "all shipment slots are busy")
		return
	}
	s.seq++
	d := s.cfg.min
	if span := s.cfg.max - s.cfg.min; span > 0 {
		d += time.Duration(s.rnd.Int64N(int64(span) + 1))
	}
	j := &job{
		Job:       fulfilment.Job{JobID: "job-" + strconv.Itoa(s.seq), State: fulfilment.JobRunning},
		warehouse: req.Warehouse,
		lines:     slices.Clone(req.Lines),
		endAt:     s.clock.Now().Add(d),
		fails:     s.rnd.Float64() < s.cfg.errRate,
	}
	for _, l := range req.Lines {
		s.skus[l.SKU].Stock -= l.Quantity
	}
	s.jobs[j.JobID] = j
	s.byKey[req.IdempotencyKey] = j
	s.running[j.JobID] = j
	s.stats.Created++
	s.stats.MaxConcurrent = max(s.stats.MaxConcurrent, len(s.running))
	s.appendLocked(journalEntry{
		Job: &journaledJob{
			JobID: j.JobID, IdempotencyKey: req.IdempotencyKey, Warehouse: j.warehouse,
			Lines: j.lines, EndAt: j.endAt, Fails: j.fails,
		},
		Created: s.stats.Created, MaxConcurrent: s.stats.MaxConcurrent, Seq: s.seq,
	})
	if d == 0 {
		// A job of no running time has ended when the create answers.
		s.endLocked(j)
	}
	writeJSON(w, http.StatusAccepted, j.Job)
}

// checkLocked returns the business rejection of req, if any.
func (s *Server) checkLocked(req fulfilment.ShipmentRequest) (code, msg string) {
	if !s.warehouses[req.Warehouse] {
		return fulfilment.CodeUnknownWarehouse, fmt.Sprintf("no warehouse %q", req.Warehouse)
	}
	need := make(map[string]int)
	for _, l := range req.Lines {
		k, ok := s.skus[l.SKU]
		switch {
		case !ok:
			return fulfilment.CodeUnknownSKU, fmt.Sprintf("item %s: unknown sku %q", l.ItemCode, l.SKU)
		case k.Warehouse != req.Warehouse:
			return fulfilment.CodeWrongWarehouse, fmt.Sprintf("item %s: sku %s is stocked in %s", l.ItemCode, l.SKU, k.Warehouse)
		case l.Quantity <= 0:
			return fulfilment.CodeInvalidQuantity, fmt.Sprintf("item %s: quantity %d", l.ItemCode, l.Quantity)
		}
		need[l.SKU] += l.Quantity
		if need[l.SKU] > k.Stock {
			return fulfilment.CodeOutOfStock, fmt.Sprintf("item %s: sku %s has %d in stock", l.ItemCode, l.SKU, k.Stock)
		}
	}
	return "", ""
}

func (s *Server) getShipment(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.settleLocked()
	j, ok := s.jobs[r.PathValue("jobId")]
	var out fulfilment.Job
	if ok {
		out = j.Job
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fulfilment.CodeNotFound, "no such job")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) reset(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	s.resetLocked()
	s.appendLocked(journalEntry{Reset: true})
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) putConfig(w http.ResponseWriter, r *http.Request) {
	var c fulfilment.Config
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&c); err != nil {
		writeError(w, http.StatusBadRequest, fulfilment.CodeBadRequest, "malformed body: "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.cfg
	if c.Capacity != nil {
		next.capacity = *c.Capacity
	}
	if c.MinDurationMs != nil {
		next.min = time.Duration(*c.MinDurationMs) * time.Millisecond
	}
	if c.MaxDurationMs != nil {
		next.max = time.Duration(*c.MaxDurationMs) * time.Millisecond
	}
	if c.ErrorRate != nil {
		next.errRate = *c.ErrorRate
	}
	if next.capacity < 0 || next.min < 0 || next.max < next.min || next.errRate < 0 || next.errRate > 1 {
		writeError(w, http.StatusBadRequest, fulfilment.CodeBadRequest,
			"need capacity >= 0, 0 <= minDurationMs <= maxDurationMs, 0 <= errorRate <= 1")
		return
	}
	s.cfg = next
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) putCatalogue(w http.ResponseWriter, r *http.Request) {
	var c fulfilment.Catalogue
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&c); err != nil {
		writeError(w, http.StatusBadRequest, fulfilment.CodeBadRequest, "malformed body: "+err.Error())
		return
	}
	s.mu.Lock()
	s.initial = cloneCatalogue(c)
	s.resetLocked()
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) failCatalogue(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("count"))
	if err != nil || n < 0 {
		writeError(w, http.StatusBadRequest, fulfilment.CodeBadRequest, "count must be a non-negative integer")
		return
	}
	s.mu.Lock()
	s.failCatalog = n
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
