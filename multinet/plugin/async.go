package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// statusJob is what the detached status writer receives on stdin.
type statusJob struct {
	Config    json.RawMessage `json:"config"`
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	UID       string          `json:"uid"`
	Value     string          `json:"value"`
}

// writeStatusDetached starts "multinet write-status" in its own session,
// with no stdout/stderr the runtime waits on, hands it the job and returns:
// with asyncNetworkStatus the etcd write (3-10 ms measured) leaves ADD's
// critical path.
func (inv *invocation) writeStatusDetached(job *statusJob) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	data, err := json.Marshal(job)
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "write-status")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The job is written to the pipe before we return: a copying goroutine
	// (cmd.Stdin) could lose it when this process exits first.
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	_, werr := in.Write(data)
	if cerr := in.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return werr
	}
	// Not waited for: it outlives us and is reaped by init.
	return cmd.Process.Release()
}

// WriteStatusMain is "multinet write-status": it writes one network-status
// annotation (job on stdin) and logs the outcome to the configured log.
func WriteStatusMain(stdin io.Reader) int {
	data, err := io.ReadAll(stdin)
	if err != nil {
		return 1
	}
	var job statusJob
	if err := json.Unmarshal(data, &job); err != nil {
		return 1
	}
	cfg, err := ParseConfig(job.Config)
	if err != nil {
		return 1
	}
	log, done := newLogger(cfg, io.Discard)
	defer done()
	inv := &invocation{cfg: cfg, log: log}
	client, err := inv.kube()
	if err == nil {
		err = client.SetNetworkStatus(context.Background(), job.Namespace, job.Name, job.UID, job.Value, statusWriteAttempts)
	}
	if err != nil {
		log.Error("network status not written", "pod", fmt.Sprintf("%s/%s", job.Namespace, job.Name), "error", err)
		return 1
	}
	log.Debug("network status written", "pod", job.Namespace+"/"+job.Name)
	return 0
}
