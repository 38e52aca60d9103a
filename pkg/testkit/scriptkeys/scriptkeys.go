// Package scriptkeys checks that Lua scripts declare every key they touch.
//
// Redis Cluster routes a script by the keys it declares in KEYS and lets
// it touch an undeclared key as long as that key hashes to the same slot,
// so a script that builds key names itself works on a cluster until the
// day its keys move (a resharding, a proxy, a client that routes by the
// declared keys only). Redis checks nothing of the kind; this package
// does, by watching a server of the test's own through MONITOR: for every
// EVAL/EVALSHA it records the keys declared and the keys each command the
// script ran (the "[db lua]" lines) touched, as Redis itself names them
// (COMMAND INFO key positions, COMMAND GETKEYS for the rest).
//
// CheckPackage runs the calling package's own tests against such a server
// and fails the test for every undeclared key and for every listed script
// the tests never ran. CheckNames reads the package's source instead: it
// fails for every key a script addresses by position (KEYS[n]) outside the
// lines that bind the keys to names.
package scriptkeys

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// Script is one script's record over a recording.
type Script struct {
	// SHA is the script's SHA1 digest (the EVALSHA argument), or the
	// function's name (the FCALL argument).
	SHA string
	// Runs counts the EVAL/EVALSHA/FCALL calls seen (an EVALSHA refused
	// with NOSCRIPT and an FCALL of a function not loaded yet included).
	Runs int
	// Undeclared maps each key a run touched without declaring it to the
	// keys that run declared.
	Undeclared map[string][]string
}

// Recorder watches one Redis server through MONITOR.
type Recorder struct {
	conn    net.Conn
	rdb     *redis.Client
	infos   map[string]*redis.CommandInfo
	done    chan struct{}
	luaLast bool // the server logs a script's commands after its EVAL line

	mu      sync.Mutex
	scripts map[string]*Script
	err     error
}

// probeKey is the key of the script Start runs to learn in which order
// the server logs a script and its commands.
const probeKey = "scriptkeys:probe"

// Start begins recording on the server at addr. Stop ends it.
func Start(ctx context.Context, addr string) (*Recorder, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	infos, err := rdb.Command(ctx).Result()
	if err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("command info: %w", err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	br := bufio.NewReaderSize(conn, 1<<20)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		return nil, errors.Join(fmt.Errorf("monitor: %w", err), conn.Close(), rdb.Close())
	}
	if l, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		return nil, errors.Join(fmt.Errorf("monitor: %q %v", l, err), conn.Close(), rdb.Close())
	}
	r := &Recorder{conn: conn, rdb: rdb, infos: infos, done: make(chan struct{}), scripts: map[string]*Script{}}
	if err := rdb.Eval(ctx, "return redis.call('EXISTS', KEYS[1])", []string{probeKey}).Err(); err != nil {
		return nil, errors.Join(fmt.Errorf("probe script: %w", err), conn.Close(), rdb.Close())
	}
	// The probe's two lines come first: they tell the order.
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return nil, errors.Join(fmt.Errorf("read monitor: %w", err), conn.Close(), rdb.Close())
		}
		src, args, ok := parseLine(strings.TrimSuffix(strings.TrimPrefix(l, "+"), "\r\n"))
		if !ok || len(args) == 0 {
			continue
		}
		if src == "lua" && strings.EqualFold(args[0], "exists") {
			r.luaLast = false
			break
		}
		if isEval(args[0]) && len(args) == 4 && args[3] == probeKey {
			r.luaLast = true
			break
		}
	}
	if r.luaLast {
		// Skip the probe's own command line.
		if _, err := br.ReadString('\n'); err != nil {
			return nil, errors.Join(fmt.Errorf("read monitor: %w", err), conn.Close(), rdb.Close())
		}
	}
	go r.read(br)
	return r, nil
}

func isEval(cmd string) bool {
	switch strings.ToLower(cmd) {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

// run is one script call being assembled from the monitor's lines.
type run struct {
	sha      string
	declared []string
	touched  [][]string // the commands the script ran
}

func (r *Recorder) read(br *bufio.Reader) {
	defer close(r.done)
	var cur *run // the EVAL the collected commands belong to
	var cmds [][]string
	flush := func() {
		if cur != nil {
			cur.touched = cmds
			r.add(cur)
		}
		cur, cmds = nil, nil
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			flush()
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				r.fail(err)
			}
			return
		}
		src, args, ok := parseLine(strings.TrimSuffix(strings.TrimPrefix(l, "+"), "\r\n"))
		if !ok || len(args) == 0 {
			continue
		}
		if src == "lua" {
			cmds = append(cmds, args)
			continue
		}
		if r.luaLast {
			flush()
			if isEval(args[0]) {
				cur = newRun(args)
			}
			continue
		}
		if isEval(args[0]) {
			cur = newRun(args)
			flush()
		} else {
			cmds = nil
		}
	}
}

func newRun(args []string) *run {
	if len(args) < 3 {
		return &run{}
	}
	ru := &run{sha: args[1]}
	if c := strings.ToLower(args[0]); c == "eval" || c == "eval_ro" {
		sum := sha1.Sum([]byte(args[1]))
		ru.sha = hex.EncodeToString(sum[:])
	}
	n, _ := strconv.Atoi(args[2])
	if 3+n <= len(args) {
		ru.declared = args[3 : 3+n]
	}
	return ru
}

func (r *Recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// add records one script call.
func (r *Recorder) add(ru *run) {
	if ru.sha == "" || len(ru.declared) == 1 && ru.declared[0] == probeKey {
		return
	}
	declared := map[string]bool{}
	for _, k := range ru.declared {
		declared[k] = true
	}
	var undeclared []string
	for _, c := range ru.touched {
		keys, err := r.keysOf(c)
		if err != nil {
			r.fail(err)
			return
		}
		for _, k := range keys {
			if !declared[k] {
				undeclared = append(undeclared, k)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.scripts[ru.sha]
	if s == nil {
		s = &Script{SHA: ru.sha, Undeclared: map[string][]string{}}
		r.scripts[ru.sha] = s
	}
	s.Runs++
	for _, k := range undeclared {
		s.Undeclared[k] = ru.declared
	}
}

// keysOf returns the keys of command args as the server names them.
func (r *Recorder) keysOf(args []string) ([]string, error) {
	info := r.infos[strings.ToLower(args[0])]
	if info != nil && info.FirstKeyPos > 0 && !hasFlag(info.Flags, "movablekeys") {
		last := int(info.LastKeyPos)
		if last < 0 {
			last = len(args) + last
		}
		step := max(int(info.StepCount), 1)
		var keys []string
		for i := int(info.FirstKeyPos); i <= last && i < len(args); i += step {
			keys = append(keys, args[i])
		}
		return keys, nil
	}
	if len(args) == 1 {
		return nil, nil // TIME and the like
	}
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := r.rdb.CommandGetKeys(ctx, a...).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no key arguments") || strings.Contains(err.Error(), "Invalid arguments") {
			return nil, nil
		}
		return nil, fmt.Errorf("command getkeys %q: %w", args, err)
	}
	return keys, nil
}

func hasFlag(flags []string, f string) bool {
	for _, x := range flags {
		if x == f {
			return true
		}
	}
	return false
}

// Stop ends the recording and returns every script seen, by SHA.
func (r *Recorder) Stop() (map[string]*Script, error) {
	cerr := r.conn.Close()
	<-r.done
	_ = r.rdb.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.scripts, r.err
	}
	if cerr != nil {
		return r.scripts, fmt.Errorf("close monitor: %w", cerr)
	}
	return r.scripts, nil
}

// parseLine splits a MONITOR line `1700000000.123456 [0 127.0.0.1:1234]
// "cmd" "arg"` into its source ("127.0.0.1:1234", or "lua" for a script's
// commands) and its unquoted arguments.
func parseLine(l string) (src string, args []string, ok bool) {
	i := strings.IndexByte(l, '[')
	j := strings.IndexByte(l, ']')
	if i < 0 || j < i {
		return "", nil, false
	}
	if f := strings.Fields(l[i+1 : j]); len(f) == 2 {
		src = f[1]
	}
	rest := l[j+1:]
	for {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			return src, args, true
		}
		if rest[0] != '"' {
			return "", nil, false
		}
		a, n, ok := unquote(rest)
		if !ok {
			return "", nil, false
		}
		args = append(args, a)
		rest = rest[n:]
	}
}

// unquote reads one argument as Redis quotes it (sdscatrepr) from the
// start of s and returns it and the bytes of s it took.
func unquote(s string) (string, int, bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), i + 1, true
		case c != '\\':
			b.WriteByte(c)
		case i+1 >= len(s):
			return "", 0, false
		default:
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 >= len(s) {
					return "", 0, false
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return "", 0, false
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(s[i])
			}
		}
	}
	return "", 0, false
}

// childEnv marks the process CheckPackage starts, so the check does not
// run again inside it.
const childEnv = "ORDERFLOW_SCRIPTKEYS_CHILD"

// CheckPackage runs the calling test binary's tests matching run (a
// -test.run pattern) against a redis-server of the test's own, recording
// every script and function call, and fails t for each key a script
// touched without declaring it and for each script in scripts (name ->
// script, or Function) the tests never ran. The tests reach that server
// through ORDERFLOW_REDIS_ADDR (testenv.Redis); the calling test itself is
// skipped in the child.
func CheckPackage[S Called](t *testing.T, scripts map[string]S, run string) {
	t.Helper()
	if os.Getenv(childEnv) != "" {
		t.Skip("inside the recorded run")
	}
	srv := testenv.StartRedis(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rec, err := Start(ctx, srv.Addr)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-test.run=" + run, "-test.skip=^" + t.Name() + "$", "-test.count=1"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1", "ORDERFLOW_REDIS_ADDR="+srv.Addr)
	out, runErr := cmd.CombinedOutput()
	seen, err := rec.Stop()
	if runErr != nil {
		t.Fatalf("the package's tests failed on the recorded Redis: %v\n%s", runErr, tail(out, 40))
	}
	if err != nil {
		t.Fatalf("recording: %v", err)
	}
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := seen[scripts[n].Hash()]
		if s == nil || s.Runs == 0 {
			t.Errorf("script %s never ran in the tests matching %q: nothing vouches for its keys", n, run)
			continue
		}
		keys := make([]string, 0, len(s.Undeclared))
		for k := range s.Undeclared {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.Errorf("script %s touched key %q without declaring it (KEYS %q)", n, k, s.Undeclared[k])
		}
	}
	for sha, s := range seen {
		if len(s.Undeclared) > 0 && !known(scripts, sha) {
			t.Errorf("a script not listed (sha %s, %d runs) touched undeclared keys, e.g. %q", sha, s.Runs, first(s.Undeclared))
		}
	}
}

// Called is what a recording names a call by: a script's SHA-1 (a
// *redis.Script's Hash) or a function's name (Function).
type Called interface{ Hash() string }

// Function is a Redis function by its name.
type Function string

// Hash returns the function's name, which its FCALL names it by.
func (f Function) Hash() string { return string(f) }

func known[S Called](scripts map[string]S, sha string) bool {
	for _, s := range scripts {
		if s.Hash() == sha {
			return true
		}
	}
	return false
}

func first(m map[string][]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

func tail(out []byte, lines int) string {
	l := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
