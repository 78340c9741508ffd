package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The node workload's log arithmetic: a meta plugin's run, the bridge runs
// inside its window (not those of another verb or outside it), the
// overhead with the wrapper's cost per delegate taken out.
func TestVerbSample(t *testing.T) {
	ms := time.Millisecond
	at := func(d time.Duration) time.Time { return time.Unix(1000, 0).Add(d) }
	lines := []logLine{
		{typ: "multinet-shim", verb: "ADD", start: at(0), took: 40 * ms},
		{typ: "bridge", verb: "ADD", start: at(5 * ms), took: 10 * ms},
		{typ: "bridge", verb: "ADD", start: at(20 * ms), took: 6 * ms},
		{typ: "bridge", verb: "ADD", start: at(50 * ms), took: 9 * ms}, // after the window
		{typ: "multinet-shim", verb: "DEL", start: at(100 * ms), took: 30 * ms},
		{typ: "bridge", verb: "DEL", start: at(101 * ms), took: 12 * ms},
		{typ: "bridge", verb: "DEL", start: at(114 * ms), took: 11 * ms},
		{typ: "multinet-shim", verb: "DEL", start: at(200 * ms), took: 3 * ms}, // a later DEL: not the first
	}
	add, ok := verbSample(lines, "multinet-shim", "ADD")
	if !ok || add.meta != 40*ms || add.delegates != 16*ms || add.overhead(ms, 2) != 22*ms {
		t.Errorf("ADD sample %+v %v, overhead %v", add, ok, add.overhead(ms, 2))
	}
	del, ok := verbSample(lines, "multinet-shim", "DEL")
	if !ok || del.meta != 30*ms || del.delegates != 23*ms {
		t.Errorf("DEL sample %+v %v", del, ok)
	}
	if _, ok := verbSample(lines[:2], "multinet-shim", "ADD"); ok {
		t.Error("a run with one delegate of two counted")
	}
	if _, ok := verbSample(lines, "multus", "ADD"); ok {
		t.Error("another meta plugin's run counted")
	}
}

// readLog reads cnitime's lines of one pod.
func TestReadLog(t *testing.T) {
	dir := t.TempDir()
	log := "bridge ADD c1 eth0 p1 1000000000 5000000 0\n" +
		"bridge ADD c2 eth0 p2 1000000000 7000000 0\n" +
		"garbage line\n" +
		"multinet ADD c1 eth0 p1 999000000 9000000 1\n"
	if err := os.WriteFile(filepath.Join(dir, "log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	ne := &nodeEnv{logPath: filepath.Join(dir, "log")}
	got, err := ne.readLogFile(ne.logPath, "p1")
	if err != nil || len(got) != 2 || got[0].took != 5*time.Millisecond || got[1].code != 1 || got[1].typ != "multinet" {
		t.Errorf("readLog = %+v, %v", got, err)
	}
}
