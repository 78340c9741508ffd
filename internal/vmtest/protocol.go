package vmtest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// The host and the guest agent talk over one virtio-serial port (on the host
// a socketpair handed to QEMU as its chardev). Everything is a frame: a kind
// byte, a session id and a payload length (big endian), then the payload.
// Sessions multiplex concurrent commands; id 0 is the agent itself.
const (
	frameStart  = 'S' // host→guest: start a command (JSON startRequest)
	frameKill   = 'K' // host→guest: SIGKILL the command's process group
	frameReady  = 'R' // guest→host: the agent is up (JSON readyMessage)
	frameStdout = 'O' // guest→host: output of a command
	frameStderr = 'E'
	frameExit   = 'X' // guest→host: the command ended, after all its output (JSON exitMessage)

	headerLen = 9
	// maxPayload bounds a frame; output is sent in chunks below it.
	maxPayload = 1 << 20
	chunk      = 32 << 10
)

type frame struct {
	kind byte
	id   uint32
	data []byte
}

type startRequest struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// Merge sends stderr as stdout (one pipe: the order of the two is kept).
	Merge bool `json:"merge"`
}

type exitMessage struct {
	// Code is the exit status, -1 when killed by a signal or never started.
	Code int `json:"code"`
	// Err says why the command could not start, or how it ended when
	// Code is -1.
	Err string `json:"err,omitempty"`
}

type readyMessage struct {
	Release string `json:"release"` // uname -r inside
	Uptime  string `json:"uptime"`  // /proc/uptime when the agent started
}

// appendFrame encodes f; callers write the result with one Write.
func appendFrame(b []byte, f frame) []byte {
	b = append(b, f.kind)
	b = binary.BigEndian.AppendUint32(b, f.id)
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.data)))
	return append(b, f.data...)
}

func readFrame(r *bufio.Reader) (frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(h[5:])
	if n > maxPayload {
		return frame{}, fmt.Errorf("vmtest protocol: frame of %d bytes (kind %q) exceeds %d", n, h[0], maxPayload)
	}
	f := frame{kind: h[0], id: binary.BigEndian.Uint32(h[1:5]), data: make([]byte, n)}
	if _, err := io.ReadFull(r, f.data); err != nil {
		return frame{}, fmt.Errorf("vmtest protocol: short frame: %w", err)
	}
	return f, nil
}
