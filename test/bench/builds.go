package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// buildID names a binary for the report: its path and the start of a hash
// of its bytes, so that two runs of one build are known as such whatever
// slot it ran in, and a rebuilt binary at the same path is not.
func buildID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("build of %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("build of %s: %w", path, err)
	}
	return fmt.Sprintf("%s (sha256 %s)", path, hex.EncodeToString(h.Sum(nil))[:12]), nil
}

// builds are the two sides --combine compares, A and B, and which slot
// each held in every report.
type builds struct {
	a, b string // labels for the table
	// slotOfA[i] is the target name build A ran as in report i.
	slotOfA []string
}

// otherSlot is the other crishim target of a two-build run.
func otherSlot(slot string) string {
	if slot == "crishim" {
		return "baseline"
	}
	return "crishim"
}

// orient finds the two builds of reps. A is the build in the crishim slot
// of the first report. Where both slots ran the same build, or a report
// does not say (written before builds were recorded), the slots are the
// sides instead.
func orient(reps []report) (builds, error) {
	bySlot := builds{a: "the crishim slot", b: "the baseline slot"}
	for range reps {
		bySlot.slotOfA = append(bySlot.slotOfA, "crishim")
	}
	if len(reps) == 0 {
		return bySlot, nil
	}
	a, b := reps[0].Builds["crishim"], reps[0].Builds["baseline"]
	if a == "" || b == "" || a == b {
		return bySlot, nil
	}
	out := builds{a: a, b: b}
	for i, r := range reps {
		c, base := r.Builds["crishim"], r.Builds["baseline"]
		switch {
		case c == a && base == b:
			out.slotOfA = append(out.slotOfA, "crishim")
		case c == b && base == a:
			out.slotOfA = append(out.slotOfA, "baseline")
		default:
			return builds{}, fmt.Errorf("report %d ran %q and %q, not the first report's two builds", i+1, c, base)
		}
	}
	return out, nil
}
