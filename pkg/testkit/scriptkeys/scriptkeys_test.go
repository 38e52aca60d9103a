package scriptkeys

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestRecorderFindsUndeclaredKeys(t *testing.T) {
	srv := testenv.StartRedis(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec, err := Start(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	declared := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1]); redis.call('ZADD', KEYS[2], 1, 'a "b"\n'); return redis.call('TIME')`)
	builds := redis.NewScript(`redis.call('HSET', ARGV[1] .. ':h:' .. ARGV[2], 'f', 'v'); redis.call('PUBLISH', 'chan', 'x'); return redis.call('ZUNIONSTORE', KEYS[1], 2, KEYS[1], ARGV[1] .. ':z')`)
	for range 2 {
		if err := declared.Run(ctx, rdb, []string{"{q}:a", "{q}:b"}, "x y").Err(); err != nil {
			t.Fatal(err)
		}
		if err := builds.Run(ctx, rdb, []string{"{q}:top"}, "{q}", "7").Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the monitor's lines trail the replies
	seen, err := rec.Stop()
	if err != nil {
		t.Fatal(err)
	}
	d := seen[declared.Hash()]
	if d == nil || d.Runs < 2 || len(d.Undeclared) != 0 {
		t.Errorf("declared script: %+v, want at least 2 runs and no undeclared keys", d)
	}
	b := seen[builds.Hash()]
	if b == nil || b.Runs < 2 {
		t.Fatalf("key-building script: %+v, want at least 2 runs", b)
	}
	want := map[string][]string{"{q}:h:7": {"{q}:top"}, "{q}:z": {"{q}:top"}}
	if diff := cmp.Diff(want, b.Undeclared); diff != "" {
		t.Errorf("undeclared keys (-want +got):\n%s", diff)
	}
}

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		line, src string
		args      []string
	}{
		{`1796076245.845636 [0 127.0.0.1:37572] "evalsha" "ab" "1" "{x}k"`, "127.0.0.1:37572", []string{"evalsha", "ab", "1", "{x}k"}},
		{`1796076245.845730 [0 lua] "set" "{x}k" "a b\"\n\\\x00"`, "lua", []string{"set", "{x}k", "a b\"\n\\\x00"}},
		{`1796076245.845777 [0 lua] "time"`, "lua", []string{"time"}},
	} {
		src, args, ok := parseLine(tc.line)
		if !ok || src != tc.src || !cmp.Equal(args, tc.args) {
			t.Errorf("parseLine(%q) = %q, %q, %v, want %q, %q", tc.line, src, args, ok, tc.src, tc.args)
		}
	}
}

func TestUnnamedFindsKeysByPosition(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"named", "local a, b = KEYS[1], KEYS[2]\nredis.call('GET', a)\nreturn redis.call('GET', b)", nil},
		{"bound over lines", "local a = KEYS[1]\nlocal b = KEYS[2]\nreturn redis.call('GET', b)", nil},
		{"bound to upvalues", "a = KEYS[1]\nb = KEYS[2]\nreturn redis.call('GET', b)", nil},
		{"assigned by position", "a = KEYS[1]\nb = KEYS[2] .. 'x'", []string{
			"s.go:5: key by position outside the binding lines: b = KEYS[2] .. 'x'",
		}},
		{"by position", "local a = KEYS[1]\nreturn redis.call('GET', KEYS[2])", []string{
			"s.go:5: key by position outside the binding lines: return redis.call('GET', KEYS[2])",
		}},
		{"bound and used", "local a = KEYS[1]; redis.call('GET', KEYS[1])", []string{
			"s.go:4: key by position outside the binding lines: local a = KEYS[1]; redis.call('GET', KEYS[1])",
		}},
		{"out of order", "local b, a = KEYS[2], KEYS[1]", []string{
			"s.go:4: binds KEYS[2] where KEYS[1] comes next",
			"s.go:4: binds KEYS[1] where KEYS[2] comes next",
		}},
		{"bound twice", "local a = KEYS[1]\nlocal b = KEYS[1]", []string{
			"s.go:5: binds KEYS[1] where KEYS[2] comes next",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := "package p\n\nvar script = `\n" + tc.src + "`\n"
			if err := os.WriteFile(filepath.Join(dir, "s.go"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			// A test file may say anything.
			if err := os.WriteFile(filepath.Join(dir, "s_test.go"), []byte("package p\n\nvar x = `KEYS[3]`\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Unnamed(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Unnamed(%q) (-want +got):\n%s", tc.src, diff)
			}
		})
	}
}
