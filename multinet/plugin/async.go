package plugin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// statusJob is what the detached status writer receives on stdin.
type statusJob struct {
	Config    json.RawMessage `json:"config"`
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	UID       string          `json:"uid"`
	Value     string          `json:"value"`
	// ContainerID is the sandbox whose ADD produced Value.
	ContainerID string `json:"containerID,omitempty"`
}

// statusWriter is a started "multinet write-status" process (its own
// session, no stdout/stderr the runtime waits on) waiting for its job on
// stdin. It is started at the beginning of ADD, in a goroutine, so that its
// fork and exec (0.5-2 ms measured here) overlap the cluster network's ADD
// instead of adding to ADD's time; with asyncNetworkStatus the etcd write
// (3-10 ms measured) leaves ADD's critical path too.
type statusWriter struct {
	cmd *exec.Cmd
	in  io.WriteCloser
}

// statusSender takes an asyncNetworkStatus job: a detached process
// (statusWriter) in the thin plugin, a goroutine of the daemon (hostWriter).
type statusSender interface {
	send(job *statusJob) error
	abort()
}

// startStatusWriter starts what will write the status: the host's (the
// daemon runs the job itself) or a detached process.
func (inv *invocation) startStatusWriter() (statusSender, error) {
	if inv.host.AsyncStatus != nil {
		return &hostWriter{inv: inv}, nil
	}
	w, err := startStatusWriter()
	if err != nil {
		return nil, err
	}
	return w, nil
}

// hostWriter hands the job to the host, which runs it after ADD returned.
type hostWriter struct{ inv *invocation }

func (w *hostWriter) send(job *statusJob) error {
	inv := w.inv
	inv.host.AsyncStatus(func() {
		if err := runStatusJob(inv.cfg, inv.log, inv.kube, job); err != nil {
			inv.log.Error("network status not written", "pod", job.Namespace+"/"+job.Name, "error", err)
		}
	})
	return nil
}

func (w *hostWriter) abort() {}

func startStatusWriter() (*statusWriter, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "write-status")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The job is written to the pipe by send before we return: a copying
	// goroutine (cmd.Stdin) could lose it when this process exits first.
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &statusWriter{cmd: cmd, in: in}, nil
}

// send hands the writer its job and lets it go (it outlives us and is
// reaped by init).
func (w *statusWriter) send(job *statusJob) error {
	data, err := json.Marshal(job)
	if err != nil {
		w.abort()
		return err
	}
	_, werr := w.in.Write(data)
	if cerr := w.in.Close(); werr == nil {
		werr = cerr
	}
	w.cmd.Process.Release()
	return werr
}

// abort closes the pipe without a job: the writer exits without writing.
func (w *statusWriter) abort() {
	w.in.Close()
	w.cmd.Process.Release()
}

// WriteStatusMain is "multinet write-status": it writes one network-status
// annotation (job on stdin) and logs the outcome to the configured log.
func WriteStatusMain(stdin io.Reader) int {
	data, err := io.ReadAll(stdin)
	if err != nil {
		return 1
	}
	if len(data) == 0 { // ADD failed: nothing to write
		return 0
	}
	var job statusJob
	if err := json.Unmarshal(data, &job); err != nil {
		return 1
	}
	cfg, err := ParseConfig(job.Config)
	if err != nil {
		return 1
	}
	log, done := NewLogger(cfg, io.Discard)
	defer done()
	inv := &invocation{cfg: cfg, log: log, host: &Host{}}
	if err := runStatusJob(cfg, log, inv.kube, &job); err != nil {
		log.Error("network status not written", "pod", job.Namespace+"/"+job.Name, "error", err)
		return 1
	}
	return 0
}

// runStatusJob writes one asyncNetworkStatus job's annotation, with the
// API client that client returns.
func runStatusJob(cfg *Config, log *slog.Logger, client func() (API, error), job *statusJob) error {
	// Under the container's lock (so after ADD returned), and only while
	// the container's plan exists: a DEL that came first has removed it,
	// and one that comes later waits for this write and then removes the
	// status again (clearStatus). Without this a DEL right after ADD could
	// be followed by the write, leaving a status for a deleted sandbox.
	if job.ContainerID != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		lock, err := lockContainer(ctx, cfg.CNIDir, job.ContainerID)
		cancel()
		if err != nil {
			return err
		}
		defer lock.unlock(false)
		if plan, err := readPlan(cfg.CNIDir, job.ContainerID); err != nil || plan == nil {
			log.Debug("network status not written: the container was deleted meanwhile", "pod", job.Namespace+"/"+job.Name, "container", job.ContainerID)
			return nil
		}
	}
	// Bounded as a whole (retries included): a DEL may be waiting for the lock.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.apiTimeout())
	defer cancel()
	c, err := client()
	if err == nil {
		err = c.SetNetworkStatus(ctx, job.Namespace, job.Name, job.UID, job.Value, statusWriteAttempts)
	}
	if err != nil {
		return err
	}
	log.Debug("network status written", "pod", job.Namespace+"/"+job.Name)
	return nil
}
