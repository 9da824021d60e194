package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/orion-sched/orion/internal/model"
)

// EnvOutputs names the file a shell task writes its outputs to: lines
// name=value, name<<DELIM blocks, or one JSON object (model.ParseOutputs).
const EnvOutputs = "ORION_OUTPUTS"

// outputsDir returns the directory the ORION_OUTPUTS files of this
// executor's attempts go in, creating it once. It is in the executor's
// owner dir (package reap), which goes with the executor, by Close or by
// the reaper after a crash, so a file an attempt left is never read for
// another; without one, a directory of its own under the log dir.
//
// The file itself is not created: the task creates it when it writes to
// it. An attempt's own directory (its log's) is created at its first
// output, and a file and a directory per attempt would cost about what
// `sh -c true` costs (see outputWriter); a path in a directory made once,
// and one failed open for a task that publishes nothing, cost next to
// nothing.
func (l *Local) outputsDir() (string, error) {
	l.outMu.Lock()
	defer l.outMu.Unlock()
	if l.outDir != "" || l.outErr != nil {
		return l.outDir, l.outErr
	}
	dir := filepath.Join(l.ownerDir, "outputs")
	if l.ownerDir == "" {
		dir, l.outErr = os.MkdirTemp(l.logDir, "outputs-")
		l.outTemp = l.outErr == nil
	} else {
		l.outErr = os.MkdirAll(dir, 0o755)
	}
	if l.outErr == nil {
		l.outDir = dir
	}
	return l.outDir, l.outErr
}

// outputSeq numbers the ORION_OUTPUTS files of a process: each attempt
// gets a path no other attempt had.
var outputSeq atomic.Int64

// outputsPath is a fresh ORION_OUTPUTS path for an attempt.
func (l *Local) outputsPath() (string, error) {
	dir, err := l.outputsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, strconv.FormatInt(outputSeq.Add(1), 10)), nil
}

// readOutputs reads, then removes, what a shell attempt wrote to its
// ORION_OUTPUTS file: no file is no outputs. It reads at most max+1 bytes,
// so a task that wrote gigabytes costs no more than one over the bound,
// and only a regular file: a FIFO left there would block the read forever.
func readOutputs(path string, max int) (model.Outputs, error) {
	if max <= 0 {
		max = model.DefaultMaxOutputBytes
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("outputs: %v", err)
	}
	defer os.Remove(path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("outputs: $%s is not a regular file", EnvOutputs)
	}
	if fi.Size() > int64(max) {
		return nil, &model.OutputsError{Msg: fmt.Sprintf("outputs file of %d bytes exceeds max_output_bytes (%d): not published, the attempt fails", fi.Size(), max)}
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("outputs: %v", err)
	}
	return model.ParseOutputs(data, max)
}

// MaxHTTPOutputBody bounds the response body an http task that declares
// outputs reads into memory to take them from; a longer body fails it.
const MaxHTTPOutputBody = 1 << 20

// httpOutputs takes an http task's declared outputs from its response
// body: the body itself as a string, and values at paths of the body read
// as JSON (numbers kept as written).
func httpOutputs(o *model.HTTPOutputs, body []byte, max int) (model.Outputs, error) {
	out := make(model.Outputs, len(o.JSON)+1)
	if o.Body != "" {
		v, err := model.OutputValue(string(body))
		if err != nil {
			return nil, fmt.Errorf("outputs.body: %v", err)
		}
		out[o.Body] = v
	}
	if len(o.JSON) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var doc any
		if err := dec.Decode(&doc); err != nil {
			return nil, fmt.Errorf("outputs.json: the response body is not JSON: %v", err)
		}
		for name, path := range o.JSON {
			p, err := model.ParseJSONPath(path)
			if err != nil {
				return nil, fmt.Errorf("outputs.json.%s: %v", name, err)
			}
			v, err := p.Find(doc)
			if err != nil {
				return nil, fmt.Errorf("outputs.json.%s: %s: %v", name, path, err)
			}
			if out[name], err = model.OutputValue(v); err != nil {
				return nil, fmt.Errorf("outputs.json.%s: %v", name, err)
			}
		}
	}
	return model.CheckOutputs(out, max)
}
