package suggest

import "testing"

func TestClosest(t *testing.T) {
	names := []string{"demo.echo", "demo.fail", "ls", "poison", "periodic"}
	for s, want := range map[string]string{
		"demo.ecko": "demo.echo", "DEMO.FAIL": "demo.fail", "lss": "ls", "posion": "poison",
		"periodci": "periodic", "reports.build": "", "": "ls", "x": "ls", "xyz": "",
	} {
		if got := Closest(s, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", s, got, want)
		}
	}
	if got := Closest("a", nil); got != "" {
		t.Errorf("Closest with no names = %q", got)
	}
	if d := Distance("kitten", "sitting"); d != 3 {
		t.Errorf("Distance(kitten, sitting) = %d, want 3", d)
	}
	if d := Distance("mſ", "ms"); d != 1 {
		t.Errorf("Distance in runes: %d, want 1", d)
	}
}
