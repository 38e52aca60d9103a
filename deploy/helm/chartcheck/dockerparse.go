package chartcheck

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The subset of the Dockerfile syntax the images use, parsed without
// BuildKit: parser directives and comments, line continuations with a
// backslash, instruction flags (--from=, --mount=), ARG, ENV and LABEL
// key=value lists with quotes, and the JSON (exec) form of ENTRYPOINT,
// CMD and RUN.

// instruction is one logical line of a Dockerfile.
type instruction struct {
	line    int               // where it starts, from 1
	keyword string            // as written (FROM, from)
	cmd     string            // upper-case
	flags   map[string]string // --name=value before the arguments
	args    string            // the rest, trimmed
}

// stage is a FROM and the instructions up to the next one.
type stage struct {
	from     instruction
	base     string // the image or earlier stage, arguments not expanded
	name     string // AS name, or ""
	commands []instruction
}

// dockerfile is a parsed Dockerfile: the ARGs before the first FROM
// (with their defaults) and the stages.
type dockerfile struct {
	syntax   string // the # syntax= parser directive (a frontend image), or ""
	metaArgs map[string]string
	stages   []stage
}

var knownInstructions = map[string]bool{
	"ADD": true, "ARG": true, "CMD": true, "COPY": true, "ENTRYPOINT": true, "ENV": true,
	"EXPOSE": true, "FROM": true, "HEALTHCHECK": true, "LABEL": true, "MAINTAINER": true,
	"ONBUILD": true, "RUN": true, "SHELL": true, "STOPSIGNAL": true, "USER": true,
	"VOLUME": true, "WORKDIR": true,
}

// flagged are the instructions whose leading --name=value words are flags.
var flagged = map[string]bool{"ADD": true, "COPY": true, "FROM": true, "RUN": true, "HEALTHCHECK": true}

// parseDockerfile parses data, returning what it understood and an error
// for each line it did not (an unknown instruction, a FROM without an
// image, an instruction before the first FROM other than ARG, keywords
// whose casing disagree).
func parseDockerfile(data []byte) (dockerfile, []error) {
	df := dockerfile{metaArgs: map[string]string{}}
	var errs []error
	for _, l := range strings.Split(string(data), "\n") {
		directive, ok := strings.CutPrefix(strings.TrimSpace(l), "#")
		if !ok {
			break // parser directives come first
		}
		if k, v, ok := strings.Cut(strings.TrimSpace(directive), "="); ok && strings.EqualFold(strings.TrimSpace(k), "syntax") {
			df.syntax = strings.TrimSpace(v)
		}
	}
	for _, in := range logicalLines(string(data)) {
		if !knownInstructions[in.cmd] {
			errs = append(errs, fmt.Errorf("line %d: unknown instruction %q", in.line, in.keyword))
			continue
		}
		switch {
		case in.cmd == "FROM":
			s, err := parseFrom(in)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			df.stages = append(df.stages, s)
		case len(df.stages) == 0 && in.cmd == "ARG":
			for k, v := range keyValues(in.args) {
				df.metaArgs[k] = v
			}
		case len(df.stages) == 0:
			errs = append(errs, fmt.Errorf("line %d: %s before the first FROM", in.line, in.keyword))
		default:
			last := &df.stages[len(df.stages)-1]
			last.commands = append(last.commands, in)
		}
	}
	return df, errs
}

// parseFrom reads FROM [--platform=…] image [AS name].
func parseFrom(in instruction) (stage, error) {
	words := strings.Fields(in.args)
	s := stage{from: in}
	switch {
	case len(words) == 1:
	case len(words) == 3 && strings.EqualFold(words[1], "as"):
		if isUpper(in.keyword) != isUpper(words[1]) {
			return s, fmt.Errorf("lint FromAsCasing: line %d: '%s' and '%s' keywords' casing do not match", in.line, words[1], in.keyword)
		}
		s.name = strings.ToLower(words[2])
	default:
		return s, fmt.Errorf("line %d: FROM %q: want an image and an optional AS name", in.line, in.args)
	}
	s.base = words[0]
	return s, nil
}

func isUpper(s string) bool { return s == strings.ToUpper(s) }

// logicalLines joins continued lines, drops comments and blank lines, and
// splits each instruction into keyword, flags and arguments.
func logicalLines(text string) []instruction {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimRight(raw, " \t\r")
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue // a comment (or parser directive) or a blank line
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\"))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(line)
		out = append(out, split(start, cur.String()))
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, split(start, cur.String()))
	}
	return out
}

func split(line int, s string) instruction {
	keyword, rest, _ := strings.Cut(strings.TrimSpace(s), " ")
	in := instruction{line: line, keyword: keyword, cmd: strings.ToUpper(keyword), flags: map[string]string{}}
	rest = strings.TrimSpace(rest)
	for flagged[in.cmd] && strings.HasPrefix(rest, "--") {
		word, after, _ := strings.Cut(rest, " ")
		name, value, _ := strings.Cut(strings.TrimPrefix(word, "--"), "=")
		in.flags[name] = value
		rest = strings.TrimSpace(after)
	}
	in.args = rest
	return in
}

// words splits s into shell-like words: quotes group and are removed, a
// backslash escapes the next character.
func words(s string) []string {
	var out []string
	var w strings.Builder
	inWord, quote, escaped := false, rune(0), false
	for _, r := range s {
		switch {
		case escaped:
			w.WriteRune(r)
			escaped = false
		case r == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

// keyValues reads key=value words (ARG, ENV, LABEL); a word without = is
// a key with an empty value, and ENV's old form "ENV key value" is read
// as one pair.
func keyValues(s string) map[string]string {
	kv := map[string]string{}
	ws := words(s)
	if len(ws) >= 2 && !strings.Contains(ws[0], "=") {
		kv[ws[0]] = strings.Join(ws[1:], " ")
		return kv
	}
	for _, w := range ws {
		k, v, _ := strings.Cut(w, "=")
		kv[k] = v
	}
	return kv
}

// execForm returns the JSON array of an exec-form ENTRYPOINT, CMD or RUN,
// or ok false for the shell form.
func execForm(args string) (argv []string, ok bool) {
	if !strings.HasPrefix(args, "[") {
		return nil, false
	}
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		return nil, false
	}
	return argv, true
}
