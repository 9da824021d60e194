// Command pause is the sandbox ("pause") container of the test cluster's
// pods: it holds the pod's namespaces, reaps orphaned children and exits on
// SIGINT or SIGTERM. A Go stand-in for Kubernetes' C pause program, built
// locally because the test cluster downloads no image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
