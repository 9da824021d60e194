package model

import (
	"strings"
	"testing"
)

func TestValidWorkerID(t *testing.T) {
	for _, ok := range []string{
		"w1", "gpu-1/4242-a1b2c3", "orion-0.orion.default.svc/1-ffffff", "A_b.c-d",
		strings.Repeat("a", MaxWorkerID),
	} {
		if !ValidWorkerID(ok) {
			t.Errorf("ValidWorkerID(%q) = false, want true", ok)
		}
	}
	for _, bad := range []string{
		"", "/w1", ".w1", "-w1", "w 1", "w1\x00", "w1\x1b[2J", "w\"1", "w1\n", "wé",
		strings.Repeat("a", MaxWorkerID+1), strings.Repeat("a", 2<<20),
	} {
		if ValidWorkerID(bad) {
			t.Errorf("ValidWorkerID(%q) = true, want false", bad)
		}
	}
}

func TestValidWorkerName(t *testing.T) {
	if !ValidWorkerName("gpu-1") || !ValidWorkerName(strings.Repeat("n", MaxWorkerName)) {
		t.Fatal("valid names refused")
	}
	for _, bad := range []string{"", "a/b", "a b", strings.Repeat("n", MaxWorkerName+1)} {
		if ValidWorkerName(bad) {
			t.Errorf("ValidWorkerName(%q) = true, want false", bad)
		}
	}
	// A name the largest pid and the random suffix follow is a valid id.
	if id := strings.Repeat("n", MaxWorkerName) + "/4194304-abcdef"; !ValidWorkerID(id) {
		t.Errorf("an id built from the longest name is invalid: %d bytes", len(id))
	}
}

func TestCheckWorkerIDCutsItsMessage(t *testing.T) {
	err := CheckWorkerID(strings.Repeat("x", 100<<10) + "\x00")
	if err == nil {
		t.Fatal("a 100 KB id with a NUL was accepted")
	}
	if msg := err.Error(); len(msg) > 300 || !strings.Contains(msg, "102401 bytes") {
		t.Fatalf("message not cut to a readable size, or without the length: %d bytes: %.200s", len(msg), msg)
	}
}
