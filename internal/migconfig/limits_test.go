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
		"a value past the limit":  {doc: flowList(MaxValues), wantErr: "the document has more than 8192 YAML values, counting what its aliases stand for"},
		"a character past":        {doc: flowList(MaxValues + 1), wantErr: "the document has 8193 characters that can start a YAML value (':', ',', '-', '[', '{', '?', '*'), more than the limit of 8192 values"},
		"characters in a comment": {doc: "# " + strings.Repeat("-", MaxValues+1) + "\na: 1\n", wantErr: "the document has 8194 characters"},
		"the depth limit":         {doc: strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)},
		"a level past the depth":  {doc: strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), wantErr: "the document nests values more than 32 levels deep"},
		"depth through an alias": {
			doc:     "a: &a " + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + "\nb: [*a]\n",
			wantErr: "the document nests values more than 32 levels deep",
		},
		"depth within, an alias at the same level": {doc: "a: &a " + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + "\nb: *a\n"},
		// Each level doubles: 2^14 leaves from a few hundred bytes.
		"aliases doubling": {doc: doubling(14), wantErr: "the document has more than 8192 YAML values, counting what its aliases stand for"},
		"aliases within":   {doc: doubling(11)},
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
	if err == nil || err.Error() != "the document is more than 262144 bytes, the limit" {
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
