package nodetest

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/patchbay-cni/patchbay/internal/link"
)

// WaitPod polls the pod until ok says so (or returns an error). On timeout
// the error describes the pod: phase, container states and its events.
func (n *Node) WaitPod(ctx context.Context, namespace, name string, what string, ok func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := poll(ctx, fmt.Sprintf("pod %s/%s %s", namespace, name, what), func() (bool, string, error) {
		var err error
		pod, err = n.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		done, err := ok(pod)
		return done, "phase " + string(pod.Status.Phase), err
	})
	if err != nil {
		return pod, fmt.Errorf("%w\n%s", err, n.DescribePod(namespace, name))
	}
	return pod, nil
}

// WaitPodRunning waits until the pod is Running and Ready (every container
// started and ready); a pod that ends (Succeeded or Failed) fails the wait.
func (n *Node) WaitPodRunning(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return n.WaitPod(ctx, namespace, name, "Running", func(p *corev1.Pod) (bool, error) {
		switch p.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			return false, fmt.Errorf("pod ended: phase %s", p.Status.Phase)
		case corev1.PodRunning:
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					return c.Status == corev1.ConditionTrue, nil
				}
			}
		}
		return false, nil
	})
}

// WaitPodSucceeded waits until every container of the pod exited 0.
func (n *Node) WaitPodSucceeded(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return n.WaitPod(ctx, namespace, name, "Succeeded", func(p *corev1.Pod) (bool, error) {
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod failed")
		}
		return p.Status.Phase == corev1.PodSucceeded, nil
	})
}

// WaitPodGone waits until the pod object no longer exists: kubelet has
// stopped its containers and its sandbox (CNI DEL) and confirmed the
// deletion.
func (n *Node) WaitPodGone(ctx context.Context, namespace, name string) error {
	err := poll(ctx, fmt.Sprintf("pod %s/%s gone", namespace, name), func() (bool, string, error) {
		p, err := n.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		return false, "phase " + string(p.Status.Phase), nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, n.DescribePod(namespace, name))
	}
	return nil
}

// WaitDaemonSet waits until the DaemonSet's pod on the node is scheduled,
// Running and Ready (with the current template), and returns it.
func (n *Node) WaitDaemonSet(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := poll(ctx, fmt.Sprintf("DaemonSet %s/%s ready", namespace, name), func() (bool, string, error) {
		ds, err := n.Client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled < 1 ||
			st.UpdatedNumberScheduled < st.DesiredNumberScheduled || st.NumberReady < st.DesiredNumberScheduled {
			return false, fmt.Sprintf("desired %d, updated %d, ready %d", st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady), nil
		}
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			return false, "", err
		}
		pods, err := n.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, err.Error(), nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == NodeName {
				pod = p
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d pods, none Running", len(pods.Items)), nil
	})
	if err != nil && pod == nil {
		return nil, err
	}
	return pod, err
}

// DescribePod summarizes a pod for error messages: phase, conditions,
// container states and the pod's events, like a short `kubectl describe`.
func (n *Node) DescribePod(namespace, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10e9)
	defer cancel()
	var b strings.Builder
	p, err := n.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		fmt.Fprintf(&b, "pod %s/%s: %v\n", namespace, name, err)
	} else {
		fmt.Fprintf(&b, "pod %s/%s: phase %s, node %q, IPs %v\n", namespace, name, p.Status.Phase, p.Spec.NodeName, p.Status.PodIPs)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "  condition %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "  container %s: ready=%v restarts=%d state=%s\n", cs.Name, cs.Ready, cs.RestartCount, containerState(cs.State))
		}
	}
	evs, err := n.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "  event %s %s (x%d): %s\n", e.Type, e.Reason, e.Count, e.Message)
		}
	}
	if ex := n.Exits(); len(ex) > 0 {
		fmt.Fprintf(&b, "  node component exits: %s\n", strings.Join(ex, "; "))
	}
	return b.String()
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return fmt.Sprintf("waiting (%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	case s.Terminated != nil:
		return fmt.Sprintf("terminated (exit %d, %s: %s)", s.Terminated.ExitCode, s.Terminated.Reason, s.Terminated.Message)
	}
	return "unknown"
}

// PodPIDs returns the processes of a pod (its sandbox's pause and its
// containers), found in the pod's cgroup, which kubelet names pod<UID>
// under the node's cgroup.
func (n *Node) PodPIDs(pod *corev1.Pod) ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	want := "pod" + string(pod.UID)
	for _, h := range hs {
		root := filepath.Join(h.mount, n.cgroup, "kubepods")
		var found string
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || found != "" {
				return fs.SkipDir
			}
			if !d.IsDir() {
				return nil
			}
			if d.Name() == want {
				found = p
				return fs.SkipDir
			}
			return nil
		})
		if found != "" {
			if pids := cgroupProcs(found); len(pids) > 0 {
				sort.Ints(pids)
				return pids, nil
			}
		}
	}
	return nil, fmt.Errorf("no process of pod %s/%s (uid %s) in cgroup /%s/kubepods", pod.Namespace, pod.Name, pod.UID, n.cgroup)
}

// Processes returns the PIDs of every process of the node: components,
// shims and pods (all run in the node's cgroup).
func (n *Node) Processes() ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var best []int
	for _, h := range hs {
		// Every process is in every hierarchy; take the fullest answer in
		// case one was read while a process was being moved.
		if pids := cgroupProcs(filepath.Join(h.mount, n.cgroup)); len(pids) > len(best) {
			best = pids
		}
	}
	sort.Ints(best)
	return best, nil
}

// PodNetnsPath returns a path to the pod's network namespace
// (/proc/<pid>/ns/net of one of its processes; valid while that process
// runs). A hostNetwork pod's is the node's (NetnsPath).
func (n *Node) PodNetnsPath(pod *corev1.Pod) (string, error) {
	if pod.Spec.HostNetwork {
		return n.NetnsPath(), nil
	}
	pids, err := n.PodPIDs(pod)
	if err != nil {
		return "", err
	}
	var node syscall.Stat_t
	if err := syscall.Stat(n.NetnsPath(), &node); err != nil {
		return "", err
	}
	for _, pid := range pids {
		p := fmt.Sprintf("/proc/%d/ns/net", pid)
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil && st.Ino != node.Ino {
			return p, nil
		}
	}
	return "", fmt.Errorf("pod %s/%s: no process in a network namespace of its own", pod.Namespace, pod.Name)
}

// Interface is one network interface of a namespace.
type Interface struct {
	Name   string
	Index  int
	Kind   string // "veth", "bridge", "device" (lo), ...
	MAC    string
	MTU    int
	Up     bool
	Master int // index of the bridge it is attached to, or 0
	Peer   int // a veth's peer (or a link's parent) index, in the other namespace
	Addrs  []netip.Prefix
}

// Interfaces lists the interfaces of the network namespace at path (e.g.
// PodNetnsPath, or NetnsPath for the node's), through one netlink handle.
func Interfaces(path string) ([]Interface, error) {
	ns, err := link.Open(path)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	links, err := ns.H.LinkList()
	if err != nil {
		return nil, fmt.Errorf("links in %s: %w", path, err)
	}
	var out []Interface
	for _, l := range links {
		a := l.Attrs()
		i := Interface{Name: a.Name, Index: a.Index, Kind: l.Type(), MAC: a.HardwareAddr.String(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0, Master: a.MasterIndex, Peer: a.ParentIndex}
		addrs, err := ns.H.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("addresses of %s in %s: %w", a.Name, path, err)
		}
		for _, ad := range addrs {
			if p, ok := netip.AddrFromSlice(ad.IP); ok {
				ones, _ := ad.Mask.Size()
				out := netip.PrefixFrom(p.Unmap(), ones)
				i.Addrs = append(i.Addrs, out)
			}
		}
		out = append(out, i)
	}
	return out, nil
}

// PodInterfaces lists the interfaces in the pod's network namespace.
func (n *Node) PodInterfaces(pod *corev1.Pod) ([]Interface, error) {
	p, err := n.PodNetnsPath(pod)
	if err != nil {
		return nil, err
	}
	return Interfaces(p)
}

// Exec runs a command in a container of a pod through the apiserver and
// kubelet (as `kubectl exec` does) and returns its output; a non-zero exit
// is an error carrying the code (k8s.io/client-go/util/exec.CodeExitError).
func (n *Node) Exec(ctx context.Context, namespace, pod, container string, command ...string) (stdout, stderr string, err error) {
	req := n.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(n.Config, "GET", req.URL().String())
	if err != nil {
		return "", "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(n.Config, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
	if err != nil {
		return "", "", err
	}
	var out, errb bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb})
	if err != nil {
		err = fmt.Errorf("exec %q in %s/%s: %w (stderr: %s)", command, namespace, pod, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

// Logs returns a container's log through the apiserver and kubelet.
func (n *Node) Logs(ctx context.Context, namespace, pod, container string) (string, error) {
	b, err := n.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	return string(b), err
}

// ContainerdSocket is containerd's socket, as the machine sees it.
func (n *Node) ContainerdSocket() string {
	return n.HostPath("/run/containerd/containerd.sock")
}

// ImportImage imports an OCI (or docker) archive into the node's
// containerd, where kubelet finds it (ctr -n k8s.io images import). Pods
// then name it with imagePullPolicy IfNotPresent (any tag but "latest") or
// Never.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.ContainerdSocket(), "-n", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", archive, err, out)
	}
	return nil
}

// Run runs a command on the node, in its network and mount namespaces (it
// sees the node's /etc/cni/net.d, /run/netns, ...), and returns its
// combined output.
func (n *Node) Run(ctx context.Context, command ...string) (string, error) {
	args := append([]string{"--target", itoa(n.supPID), "--net", "--mount", "--"}, command...)
	out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("on the node: %q: %v: %s", command, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}
