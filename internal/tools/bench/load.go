package bench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// MachineLoad is the machine's 1-minute load average at the start and at
// the end of a run, next to its CPU count: these machines are shared, and a
// figure means little without how busy the machine was. nil where
// /proc/loadavg cannot be read (not Linux).
type MachineLoad struct {
	LoadStart *float64 `json:"load_average_1m_start"`
	LoadEnd   *float64 `json:"load_average_1m_end"`
	CPUs      int      `json:"cpus"`
}

// loadAverage reads the 1-minute load average.
func loadAverage() *float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return nil
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return nil
	}
	return &v
}

func (m *MachineLoad) start() { m.LoadStart, m.CPUs = loadAverage(), runtime.NumCPU() }
func (m *MachineLoad) end()   { m.LoadEnd = loadAverage() }

// String is the table's note: "2.31 at the start, 3.02 at the end, 2 CPUs".
func (m MachineLoad) String() string {
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'f', 2, 64)
	}
	return f(m.LoadStart) + " at the start, " + f(m.LoadEnd) + " at the end, " + strconv.Itoa(m.CPUs) + " CPUs"
}
