package criconfig

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "alpha", "B": "beta", "EMPTY": "", "DOLLAR": "$(A)"}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"$(A)", "alpha"},
		{"x$(A)y$(B)z", "xalphaybetaz"},
		{"$(EMPTY)", ""},
		{"$(MISSING)", "$(MISSING)"},
		{"$(A)$(MISSING)$(B)", "alpha$(MISSING)beta"},
		{"$$(A)", "$(A)"},
		{"$$$(A)", "$alpha"},
		{"$$$$", "$$"},
		{"$", "$"},
		{"a$", "a$"},
		{"$x", "$x"},
		{"$(A", "$(A"},
		{"$(", "$("},
		{"$()", "$()"},
		{"$(DOLLAR)", "$(A)"}, // values are not expanded again
		{"100$", "100$"},
		{"ü$(A)ü", "üalphaü"},
	}
	for _, tt := range tests {
		if got := Expand(tt.in, lookup); got != tt.want {
			t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
