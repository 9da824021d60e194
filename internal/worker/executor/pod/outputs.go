package pod

import (
	"fmt"

	"github.com/orion-sched/orion/internal/model"
)

// A pod task publishes outputs as every task does, by writing them to the
// file named by ORION_OUTPUTS (model.ParseOutputs: name=value lines,
// name<<DELIM blocks, or one JSON object). For a pod that file is the
// container's termination message (/dev/termination-log): Kubernetes
// copies it into the pod's status when the container ends, so outputs need
// neither a volume nor the log, and a worker that adopts the pod reads
// them there too. The kubelet keeps at most 4 KiB of it and cuts the rest
// silently: a message of that size may have been cut (a value short, a
// name lost), so it fails the attempt, saying so.

// maxMessage is the kubelet's bound on a container's termination message.
const maxMessage = 4096

// outputs publishes what a succeeded container wrote to ORION_OUTPUTS;
// outputs it cannot publish fail the attempt, as for shell tasks.
func (f *follower) outputs(msg string) {
	if len(msg) >= maxMessage {
		f.res.Outcome = model.Failed
		f.res.Error = fmt.Sprintf("outputs of %d bytes or more: Kubernetes cuts a container's termination message (ORION_OUTPUTS) at %d bytes, so they may be cut: not published, the attempt fails", maxMessage, maxMessage)
		return
	}
	o, err := model.ParseOutputs([]byte(msg), f.a.MaxOutputBytes)
	if err != nil {
		f.res.Outcome, f.res.Error = model.Failed, err.Error()
		return
	}
	f.res.Outputs = o
}
