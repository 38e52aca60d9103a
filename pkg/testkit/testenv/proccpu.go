package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat
// (100 on Linux whatever the kernel's HZ).
const clockTicks = 100

// GroupCPU is the user+system CPU seconds used so far by the live
// processes of process group pgid, read from /proc/<pid>/stat. A process
// that exits between the listing and the read is left out.
func GroupCPU(pgid int) (float64, error) {
	if pgid <= 0 {
		return 0, fmt.Errorf("process group %d: none", pgid)
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("list /proc: %w", err)
	}
	var sum float64
	found := false
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		f, err := statFields(pid)
		if err != nil {
			continue // gone meanwhile
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			sum += cpuSeconds(f)
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("process group %d: no live process", pgid)
	}
	return sum, nil
}

// ProcessCPU is the user+system CPU seconds process pid (all its
// threads) has used so far.
func ProcessCPU(pid int) (float64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return cpuSeconds(f), nil
}

// CPU is the CPU seconds the node's processes (the Erlang VM and its
// helpers, one process group) have used so far.
func (n *RabbitNode) CPU() (float64, error) {
	return GroupCPU(n.ProcessGroup())
}

// statFields are the fields of /proc/<pid>/stat after the command name
// (which may hold spaces): state, ppid, pgrp, ...
func statFields(pid int) ([]string, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, s)
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	return f, nil
}

// cpuSeconds is utime+stime of stat fields, in seconds.
func cpuSeconds(f []string) float64 {
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}
