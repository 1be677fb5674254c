package yamldoc

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    any
		wantErr string
	}{
		{name: "numbers as json.Number", in: "a: 1.50\nb: [x, true]\nc: 12345678901234567890\n",
			want: map[string]any{"a": json.Number("1.5"), "b": []any{"x", true}, "c": json.Number("12345678901234567890")}},
		{name: "JSON", in: `{"a": 7}`, want: map[string]any{"a": json.Number("7")}},
		{name: "a key twice keeps the last", in: "a: 1\na: 2\n", want: map[string]any{"a": json.Number("2")}},
		{name: "empty", in: "", want: nil},
		{name: "bad indentation", in: "a:\n  b: 1\n c: 2\n", wantErr: "invalid YAML"},
		{name: "tab", in: "a:\n\tb: 1\n", wantErr: "invalid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
		})
	}
}
