// Command pause is the test node's pod sandbox process (the image
// nodetest.PauseImage): it holds the pod's namespaces open, reaps the
// zombies it inherits as PID 1, and exits on SIGINT or SIGTERM. Built
// static (CGO_ENABLED=0) so it runs in an image holding nothing else.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
