package report

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// Machine describes where the run happened.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Memory string `json:"memory"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	NoFile string `json:"nofile_hard_limit"`
	// LoadStart and LoadEnd are /proc/loadavg when the run began and
	// ended: the machine is shared, and a busy one slows every figure.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end,omitempty"`
}

// LoadAvg is the first three fields of /proc/loadavg.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// ThisMachine reads /proc and uname.
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), LoadStart: LoadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				m.Memory = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/self/limits"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Max open files") {
				if f := strings.Fields(l); len(f) >= 5 {
					m.NoFile = f[4]
				}
			}
		}
	}
	return m
}
