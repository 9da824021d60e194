package reap

import "testing"

func TestParseStat(t *testing.T) {
	t.Parallel()
	// comm may contain spaces and parentheses.
	line := "4242 (a) b (c) S 1 4240 4200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100\n"
	st, err := parseStat([]byte(line))
	if err != nil || st != (Stat{State: 'S', PGrp: 4240, SID: 4200, Start: 987654}) {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := parseStat([]byte("4242 (a) S 1 2")); err == nil {
		t.Error("short line parsed")
	}
}
