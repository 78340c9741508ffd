package launch

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestStopKillsWhatIgnoresTheAsk(t *testing.T) {
	cmd := exec.Command("sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.1; done`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Cmd.SysProcAttr.Pdeathsig; got != syscall.SIGKILL {
		t.Fatalf("Pdeathsig %v, want SIGKILL", got)
	}
	start := StartTime(p.Pid())
	if start == "" {
		t.Fatalf("no start time for the live pid %d", p.Pid())
	}
	// Asked only once sh ignores SIGTERM.
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("sh did not say it was ready: %v", err)
	}
	t0 := time.Now()
	if err := p.Stop("sh", 300*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Fatalf("Stop took %v: want the 300ms grace, then the kill", d)
	}
	// It ignored SIGTERM: SIGKILL ended it.
	done, err := p.Exited()
	if !done || err == nil || err.Error() != "signal: killed" {
		t.Fatalf("after Stop: exited %v, %v; want killed", done, err)
	}
	if StartTime(p.Pid()) == start {
		t.Fatal("the process is still there")
	}
	// A second Stop does nothing and reports the same.
	if err := p.Stop("sh", 0, func() error { return errors.New("must not be asked again") }); err != nil {
		t.Fatal(err)
	}
}

func TestStopAsks(t *testing.T) {
	p, err := Start(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	asked := false
	t0 := time.Now()
	err = p.Stop("sleep", 30*time.Second, func() error {
		asked = true
		return p.Cmd.Process.Signal(os.Interrupt)
	})
	if err != nil || !asked {
		t.Fatalf("Stop: %v, asked %v", err, asked)
	}
	if d := time.Since(t0); d > 25*time.Second {
		t.Fatalf("Stop took %v: the ask did not end it within its 30 s grace", d)
	}
	if _, err := p.Exited(); err == nil || err.Error() != "signal: interrupt" {
		t.Fatalf("ended with %v, want signal: interrupt", err)
	}
}
