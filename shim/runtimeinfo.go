package shim

import (
	"fmt"
	"regexp"
	"strconv"
)

// runtimeRelease is a runtime's major.minor version.
type runtimeRelease struct{ major, minor int }

func (r runtimeRelease) String() string { return fmt.Sprintf("%d.%d", r.major, r.minor) }

func (r runtimeRelease) atLeast(o runtimeRelease) bool {
	return r.major > o.major || r.major == o.major && r.minor >= o.minor
}

// releasePattern takes major.minor from what runtimes report: "1.6.20",
// "v1.7.2", Debian's "1.6.20~ds1", "2.0.0-rc.1".
var releasePattern = regexp.MustCompile(`^v?(\d+)\.(\d+)`)

func parseRuntimeRelease(s string) (runtimeRelease, bool) {
	m := releasePattern.FindStringSubmatch(s)
	if m == nil {
		return runtimeRelease{}, false
	}
	major, err1 := strconv.Atoi(m[1])
	minor, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil {
		return runtimeRelease{}, false
	}
	return runtimeRelease{major, minor}, true
}

// support is what crishim knows of one runtime and one CRI feature.
type support int

const (
	supportUnknown support = iota // not in the table, or a version crishim cannot compare
	supportIgnores                // a release from before the one that honours it
	supportHonours                // a release that honours it
)

// runtimeSupport lists the runtimes known to implement one CRI feature, by
// the runtime name of their CRI Version answer, with the first release that
// does.
type runtimeSupport []struct {
	runtime string
	since   runtimeRelease
}

// honoursTarget: CRI PID namespace TARGET (docs/pid-target.md shows the
// same table). containerd before 1.5 accepted TARGET without joining the
// target: a debug shell silently saw only /pause. Runtimes not listed are
// given TARGET and verified after start (targetmode.go): what decides is
// what the runtime does, and the table only says where emulation is needed.
var honoursTarget = runtimeSupport{
	{"containerd", runtimeRelease{1, 5}},
}

// honoursStopSignal: CRI ContainerConfig.stop_signal (docs/signals.md shows
// the same table). containerd before 2.3 and CRI-O before 1.33 accept the
// field and ignore it: the container gets its image's STOPSIGNAL or SIGTERM.
// CRI-O 1.33 and later deliver it but still report RUNTIME_DEFAULT in
// ContainerStatus.
var honoursStopSignal = runtimeSupport{
	{"containerd", runtimeRelease{2, 3}},
	{"cri-o", runtimeRelease{1, 33}},
}

// lookup tells what the table knows of feature in the runtime named by a
// CRI Version answer, and says it in a sentence.
func (t runtimeSupport) lookup(feature, name, version string) (support, string) {
	for _, rt := range t {
		if rt.runtime != name {
			continue
		}
		rel, ok := parseRuntimeRelease(version)
		if !ok {
			return supportUnknown, fmt.Sprintf("%s version %q is not a version crishim can compare", name, version)
		}
		if rel.atLeast(rt.since) {
			return supportHonours, fmt.Sprintf("%s %s honours %s (since %s)", name, version, feature, rt.since)
		}
		return supportIgnores, fmt.Sprintf("%s %s ignores %s (honoured since %s)", name, version, feature, rt.since)
	}
	return supportUnknown, fmt.Sprintf("runtime %q %s is not known to honour %s", name, version, feature)
}
