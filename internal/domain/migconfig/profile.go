package migconfig

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// profileName is a MIG profile name read the way mig-parted reads it
// (go-nvlib's parseMigProfile): [<c>c.]<g>g.<m>gb, then either "+" or "-"
// and a comma-separated list of attributes ("1g.10gb+me", "1g.24gb-me",
// "1g.24gb+me.all"). The numbers are decimal and may have leading zeros.
type profileName struct {
	c, g, gb int
	// neg: the attributes follow "-" (the profile lacks them).
	neg   bool
	attrs []string
}

// canonical is the name migflex and NVML use: without leading zeros, the
// compute-instance part dropped when it spans the GPU instance
// ("1c.1g.5gb" is "1g.5gb"), attributes sorted: "1g.05gb" is "1g.5gb", as
// mig-parted applies it.
func (p profileName) canonical() string {
	var b strings.Builder
	if p.c != p.g {
		fmt.Fprintf(&b, "%dc.", p.c)
	}
	fmt.Fprintf(&b, "%dg.%dgb", p.g, p.gb)
	if len(p.attrs) > 0 {
		sign := "+"
		if p.neg {
			sign = "-"
		}
		// mig-parted compares attribute lists sorted: "+me,gfx" is "+gfx,me".
		b.WriteString(sign + strings.Join(slices.Sorted(slices.Values(p.attrs)), ","))
	}
	return b.String()
}

// computeInstance reports whether the name is a compute-instance profile:
// fewer compute slices than its GPU instance, which then holds several.
func (p profileName) computeInstance() bool { return p.c < p.g }

// parseProfileName reads name with mig-parted's rules; the error says what
// is wrong with it. Whether a GPU has the profile is Validate's question.
func parseProfileName(name string) (profileName, error) {
	var p profileName
	if name == "" {
		return p, errors.New("empty profile name")
	}
	if len(name) > maxQuoted {
		return p, fmt.Errorf("profile %s: longer than %d characters", quote(name), maxQuoted)
	}
	if strings.TrimSpace(name) != name {
		return p, fmt.Errorf("profile %s: leading or trailing spaces", quote(name))
	}
	fields, attrs, plus := strings.Cut(name, "+")
	if f, a, minus := strings.Cut(name, "-"); minus {
		if plus {
			return p, fmt.Errorf("profile %s: both '+' and '-' attributes", quote(name))
		}
		fields, attrs, p.neg = f, a, true
	}
	if err := p.parseFields(fields); err != nil {
		if lower := strings.ToLower(name); lower != name {
			if _, lerr := parseProfileName(lower); lerr == nil {
				return p, fmt.Errorf("profile %s: profile names are lower case (%s)", quote(name), quote(lower))
			}
		}
		return p, fmt.Errorf("profile %s: %v (want [<c>c.]<g>g.<m>gb with optional attributes, e.g. 2g.20gb, 1g.10gb+me, 1g.24gb-me)", quote(name), err)
	}
	if plus || p.neg {
		if err := p.parseAttributes(attrs); err != nil {
			return p, fmt.Errorf("profile %s: %v", quote(name), err)
		}
	}
	return p, nil
}

func (p *profileName) parseFields(s string) error {
	parts := strings.Split(s, ".")
	var err error
	switch len(parts) {
	case 2:
		if p.g, err = profileField(parts[0], "g"); err != nil {
			return err
		}
		p.c = p.g
	case 3:
		if p.c, err = profileField(parts[0], "c"); err != nil {
			return err
		}
		if p.g, err = profileField(parts[1], "g"); err != nil {
			return err
		}
		parts = parts[1:]
	default:
		return errors.New("not a MIG profile name")
	}
	p.gb, err = profileField(parts[1], "gb")
	return err
}

// profileField reads "<n><unit>", n a decimal number.
func profileField(s, unit string) (int, error) {
	digits, ok := strings.CutSuffix(s, unit)
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number followed by %q", s, unit)
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n, nil
}

// parseAttributes reads a comma-separated list of attributes: letters,
// digits and inner dots, starting with a letter, each once.
func (p *profileName) parseAttributes(s string) error {
	for a := range strings.SplitSeq(s, ",") {
		switch {
		case a == "":
			return errors.New("empty attribute")
		case a[0] >= '0' && a[0] <= '9':
			return fmt.Errorf("attribute %q starts with a digit", a)
		case a[0] == '.' || a[len(a)-1] == '.':
			return fmt.Errorf("attribute %q starts or ends with a dot", a)
		case strings.TrimLeft(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.") != "":
			return fmt.Errorf("attribute %q has characters other than letters, digits and dots", a)
		case slices.Contains(p.attrs, a):
			return fmt.Errorf("attribute %q given twice", a)
		}
		p.attrs = append(p.attrs, a)
	}
	return nil
}

// profileOf reads a profile name from a document: its canonical form, or
// an error when mig-parted would not read it either, or when it names a
// compute-instance profile, which migflex does not create.
func profileOf(name string) (string, error) {
	p, err := parseProfileName(name)
	if err != nil {
		return "", err
	}
	if p.computeInstance() {
		gi := p
		gi.c = gi.g
		return "", fmt.Errorf("profile %s: compute-instance profiles (%d of the %d compute slices of a GPU instance) are not supported: migflex gives each GPU instance one compute instance spanning it, and serves that; name the GPU-instance profile (%s) instead, or keep this configuration for mig-parted", quote(name), p.c, p.g, quote(gi.canonical()))
	}
	return p.canonical(), nil
}
