// Command coredns is CoreDNS with only the plugins the test cluster's
// Corefile uses (test/kube/manifests/coredns.yaml): the full build, with
// every cloud provider's SDK, takes ten minutes on 2 cores; this one about
// two. Its own module, pinned to the CoreDNS release in go.mod.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The order CoreDNS's own plugin.cfg gives these plugins.
	dnsserver.Directives = []string{"ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes", "loop"}
}

func main() { coremain.Run() }
