package shim

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Linux numbers signals the same way on the architectures Kubernetes nodes
// run (amd64, arm64, ppc64le, s390x); the container's kernel is the node's,
// so these are the numbers that matter, whatever crishim was built for.
const (
	sigRTMIN = 34 // as glibc, musl and Kubernetes count it: 32 and 33 belong to the C library
	sigRTMAX = 64
)

// signalNames are the standard signals by number; aliases map to the same
// numbers in signalAliases.
var signalNames = map[int]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
	8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
	14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP",
	20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ",
	26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS",
}

var signalAliases = map[string]int{"SIGIOT": 6, "SIGCLD": 17, "SIGPOLL": 29}

// signal is a Linux signal with its canonical name.
type signal struct {
	num  int
	name string
}

func (s signal) sys() syscall.Signal { return syscall.Signal(s.num) }

// signalByNumber names a Linux signal number.
func signalByNumber(n int) (signal, bool) {
	if name, ok := signalNames[n]; ok {
		return signal{n, name}, true
	}
	switch {
	case n == sigRTMIN:
		return signal{n, "SIGRTMIN"}, true
	case n == sigRTMAX:
		return signal{n, "SIGRTMAX"}, true
	case n > sigRTMIN && n <= sigRTMIN+(sigRTMAX-sigRTMIN)/2:
		return signal{n, fmt.Sprintf("SIGRTMIN+%d", n-sigRTMIN)}, true
	case n > sigRTMIN && n < sigRTMAX:
		return signal{n, fmt.Sprintf("SIGRTMAX-%d", sigRTMAX-n)}, true
	}
	return signal{}, false
}

// parseSignal reads a signal as an operator writes it: "SIGHUP", "hup",
// "SIGRTMIN+3", "RTMAX-1" or a number ("1").
func parseSignal(s string) (signal, error) {
	in := strings.TrimSpace(s)
	if n, err := strconv.Atoi(in); err == nil {
		if sig, ok := signalByNumber(n); ok {
			return sig, nil
		}
		return signal{}, fmt.Errorf("%q: no Linux signal has that number (1-31, %d-%d)", s, sigRTMIN, sigRTMAX)
	}
	name := strings.ToUpper(in)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	for n, known := range signalNames {
		if known == name {
			return signal{n, known}, nil
		}
	}
	if n, ok := signalAliases[name]; ok {
		return signal{n, signalNames[n]}, nil
	}
	for _, base := range []struct {
		prefix string
		num    int
		sign   int
	}{{"SIGRTMIN", sigRTMIN, 1}, {"SIGRTMAX", sigRTMAX, -1}} {
		rest, ok := strings.CutPrefix(name, base.prefix)
		if !ok {
			continue
		}
		off := 0
		if rest != "" {
			op := "+"
			if base.sign < 0 {
				op = "-"
			}
			digits, ok := strings.CutPrefix(rest, op)
			var err error
			if off, err = strconv.Atoi(digits); !ok || err != nil || off < 0 || off > sigRTMAX-sigRTMIN {
				break
			}
		}
		if sig, ok := signalByNumber(base.num + base.sign*off); ok {
			return sig, nil
		}
	}
	return signal{}, fmt.Errorf("%q: not a Linux signal name (SIGHUP, SIGUSR1, SIGRTMIN+1, ...) or number", s)
}

// criSignal turns the CRI enum into a Linux signal; RUNTIME_DEFAULT and
// values newer than crishim's cri-api have none.
func criSignal(v runtimeapi.Signal) (signal, bool) {
	if v == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return signal{}, false
	}
	name, ok := runtimeapi.Signal_name[int32(v)]
	if !ok {
		return signal{}, false
	}
	name = strings.TrimPrefix(name, "SIGNAL_")
	name = strings.Replace(name, "PLUS", "+", 1)
	name = strings.Replace(name, "MINUS", "-", 1)
	sig, err := parseSignal(name)
	return sig, err == nil
}

// toCRISignal is the CRI enum value of a signal, for ContainerStatus.
func toCRISignal(sig signal) (runtimeapi.Signal, bool) {
	name := strings.TrimPrefix(sig.name, "SIG")
	name = strings.Replace(name, "+", "PLUS", 1)
	name = strings.Replace(name, "-", "MINUS", 1)
	v, ok := runtimeapi.Signal_value["SIGNAL_SIG"+name]
	return runtimeapi.Signal(v), ok
}
