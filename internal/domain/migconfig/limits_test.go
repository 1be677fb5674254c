package migconfig

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// flowList is a YAML flow list of n scalars: n+1 values, n characters that
// can start one.
func flowList(n int) string {
	return "[" + strings.Repeat("0,", n-1) + "0]"
}

// TestCheckSizeLimits puts documents at and just past each limit.
func TestCheckSizeLimits(t *testing.T) {
	tests := map[string]struct {
		doc     string
		wantErr string // empty: within the limits
	}{
		"the size limit":          {doc: "#" + strings.Repeat("x", MaxDocumentBytes-1)},
		"a byte past the size":    {doc: "#" + strings.Repeat("x", MaxDocumentBytes), wantErr: "the document is 262145 bytes, more than the limit of 262144"},
		"the value limit":         {doc: flowList(MaxValues - 1)},
		"a value past the limit":  {doc: flowList(MaxValues), wantErr: "the document has more than 16384 YAML values, counting what its aliases stand for, the limit (migconfig.MaxValues); the limits are in internal/domain/migconfig/limits.go"},
		"the character limit":     {doc: "# " + strings.Repeat("-", MaxValueStarts-1) + "\na: 1\n"},
		"a character past":        {doc: flowList(MaxValueStarts + 1), wantErr: "the document has 32769 characters that can start a YAML value (':', ',', '-', '[', '{', '?', '*'), more than the limit of 32768 such characters (migconfig.MaxValueStarts); the limits are in internal/domain/migconfig/limits.go"},
		"characters in a comment": {doc: "# " + strings.Repeat("-", MaxValueStarts+1) + "\na: 1\n", wantErr: "the document has 32770 characters"},
		"the depth limit":         {doc: strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)},
		"a level past the depth":  {doc: strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), wantErr: "the document nests values more than 32 levels deep"},
		"depth through an alias": {
			doc:     "a: &a " + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + "\nb: [*a]\n",
			wantErr: "the document nests values more than 32 levels deep",
		},
		"depth within, an alias at the same level": {doc: "a: &a " + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + "\nb: *a\n"},
		// Each level doubles: 2^14 leaves from a few hundred bytes.
		"aliases doubling": {doc: doubling(15), wantErr: "the document has more than 16384 YAML values, counting what its aliases stand for"},
		"aliases within":   {doc: doubling(12)},
		"an alias cycle":   {doc: "a: &a [*a]\n", wantErr: "invalid YAML: an alias refers to a value that contains it"},
		"unknown anchor":   {doc: "a: *b\n", wantErr: "invalid YAML: yaml: unknown anchor 'b' referenced"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := checkSize([]byte(tc.doc))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("checkSize: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantErr)):
				t.Fatalf("checkSize error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// doubling is a document whose last anchor stands for 2^levels scalars.
func doubling(levels int) string {
	var b strings.Builder
	b.WriteString("l0: &l0 x\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [*l%d, *l%d]\n", i, i, i-1, i-1)
	}
	return b.String()
}

func TestErrorList(t *testing.T) {
	var l errorList
	if l.err() != nil {
		t.Fatalf("empty list: %v", l.err())
	}
	for i := range MaxErrors + 5 {
		l.addf("problem %d", i)
	}
	want := make([]string, 0, MaxErrors+1)
	for i := range MaxErrors {
		want = append(want, fmt.Sprintf("problem %d", i))
	}
	want = append(want, "... and 5 more")
	if diff := cmp.Diff(want, strings.Split(l.err().Error(), "\n")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if l.len() != MaxErrors+5 {
		t.Errorf("len %d", l.len())
	}
}

func TestQuote(t *testing.T) {
	if got := quote("1g.10gb"); got != `"1g.10gb"` {
		t.Errorf("quote = %s", got)
	}
	long := strings.Repeat("é", 100) // 200 bytes: the cut falls inside a rune
	got := quote(long)
	if !strings.HasSuffix(got, "... (200 bytes)") || len(got) > maxQuoted+40 || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("quote = %s", got)
	}
}

func TestReadDocument(t *testing.T) {
	ok := strings.Repeat("x", MaxDocumentBytes)
	if got, err := ReadDocument(strings.NewReader(ok)); err != nil || len(got) != MaxDocumentBytes {
		t.Fatalf("ReadDocument at the limit: %d bytes, %v", len(got), err)
	}
	_, err := ReadDocument(strings.NewReader(ok + "x"))
	if err == nil || !strings.HasPrefix(err.Error(), "the document is more than 262144 bytes, the limit (migconfig.MaxDocumentBytes); the limits are in internal/domain/migconfig/limits.go") {
		t.Fatalf("ReadDocument past the limit: %v", err)
	}
	// It stops a byte past the limit instead of reading on.
	r := &countingReader{}
	if _, err := ReadDocument(r); err == nil || r.n > MaxDocumentBytes+1<<16 {
		t.Fatalf("read %d bytes of an endless input: %v", r.n, err)
	}
}

// countingReader is an endless input that counts what was read.
type countingReader struct{ n int }

func (r *countingReader) Read(p []byte) (int, error) {
	if r.n > 1<<30 {
		return 0, errors.New("read on and on")
	}
	for i := range p {
		p[i] = 'x'
	}
	r.n += len(p)
	return len(p), nil
}

// fleetDocument is the shape of a fleet's shared config file: n small
// named configurations, each a commented block of two entries (one per GPU
// model, by device-filter), about 590 bytes each, as issue 29's 250 KiB
// file of 444 configurations was.
func fleetDocument(n int) string {
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n")
	for i := range n {
		fmt.Fprintf(&b, `  # rack %03d, row %d: inference pool of team %d, owned by the platform group,
  # changed through the fleet's change process; see the runbook before editing
  # contact: gpu-platform on-call, ticket queue GPU-OPS, escalation via the team lead and the duty manager today
  rack-%03d-pool-%d-inference-small-slices:
    - device-filter: "0x233010DE"
      devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 3
        "2g.20gb": 2
    - device-filter: "0x20B210DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
`, i%1000, i%7, i%50, i, i%9)
	}
	return b.String()
}

// TestDocumentedLimitsBind: a valid fleet file near the size limit parses,
// so the limits INSTALL.md names for size and configurations are the ones
// a real file meets first, not the value counts that bound the decoder.
func TestDocumentedLimitsBind(t *testing.T) {
	doc := fleetDocument(444)
	if n := len(doc); n < 248<<10 || n > 252<<10 {
		t.Fatalf("the fleet document is %d bytes, want about 250 KiB", n)
	}
	// What the old single limit of 8,192 refused it for.
	if n := valueStarts([]byte(doc)); n <= 8192 || n > MaxValueStarts {
		t.Fatalf("the fleet document has %d characters that can start a value, want more than 8,192 (the old limit) and at most %d", n, MaxValueStarts)
	}
	spec, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("a valid 250 KiB fleet file of 444 configurations: %v", err)
	}
	if len(spec.Configs) != 444 {
		t.Errorf("%d configurations, want 444", len(spec.Configs))
	}
	// The same shape past the size limit meets the size limit.
	_, err = Parse([]byte(fleetDocument(460)))
	if err == nil || !strings.Contains(err.Error(), "more than the limit of 262144 (migconfig.MaxDocumentBytes)") {
		t.Errorf("460 configurations, past 256 KiB: %v, want the size limit", err)
	}
	// Configurations small enough that 1,025 fit in the size limit meet
	// the configuration limit.
	var small strings.Builder
	small.WriteString("version: v1\nmig-configs:\n")
	for i := range MaxConfigs + 1 {
		fmt.Fprintf(&small, "  c%04d:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.10gb\": 7\n", i)
	}
	_, err = Parse([]byte(small.String()))
	if err == nil || !strings.Contains(err.Error(), "1025 configurations, more than the limit of 1024 (migconfig.MaxConfigs)") {
		t.Errorf("1,025 configurations: %v, want the configuration limit", err)
	}
}
