package main

import (
	"testing"
	"time"
)

func TestParseDefaultsAndRefusals(t *testing.T) {
	c, err := parse(nil)
	if err != nil || c.answerTimeout != 5*time.Minute || c.leaseName != "crishim-notification-controller" || c.writeInterval != time.Second {
		t.Errorf("defaults %+v, %v", c, err)
	}
	for _, args := range [][]string{{"--node-answer-timeout=0"}, {"--write-interval=-1s"}, {"extra"}} {
		if _, err := parse(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
