package cli

import (
	"fmt"
	"strings"
)

// Enum is the values a string type may take, with what it is called in
// errors ("MIG strategy"). It is the one parser of migflex's enumerated
// options, flags or not.
type Enum[T ~string] struct {
	what   string
	values []T
}

// NewEnum returns the enum of values, the first being the usual default.
func NewEnum[T ~string](what string, values ...T) Enum[T] {
	return Enum[T]{what: what, values: values}
}

// Parse returns s as a T, or an error naming the values: unknown MIG
// strategy "all" (want one of mixed, single, none).
func (e Enum[T]) Parse(s string) (T, error) {
	for _, v := range e.values {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown %s %q (want one of %s)", e.what, s, e.List())
}

// List is the values, comma-separated.
func (e Enum[T]) List() string {
	names := make([]string, len(e.values))
	for i, v := range e.values {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}

// EnumVar declares a flag whose values are e's; an unknown value is an
// error naming them, on the command line or in the environment.
func EnumVar[T ~string](f *Flags, p *T, name string, def T, e Enum[T], usage string, opts ...Option) {
	*p = def
	f.Var(&enumValue[T]{p: p, e: e}, name, fmt.Sprintf("%s (%s)", usage, e.List()), opts...)
	f.Lookup(name).DefValue = string(def)
}

type enumValue[T ~string] struct {
	p *T
	e Enum[T]
}

func (v *enumValue[T]) Set(s string) error {
	t, err := v.e.Parse(s)
	if err != nil {
		return err
	}
	*v.p = t
	return nil
}

func (v *enumValue[T]) String() string {
	if v.p == nil {
		return ""
	}
	return string(*v.p)
}
