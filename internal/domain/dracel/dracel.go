// Package dracel reads DRA device selectors with the scheduler's own CEL
// library (k8s.io/dynamic-resource-allocation/cel), so that what migflex
// says about a DeviceClass's or a ResourceClaim's selector (the planner's
// MigReshapeClaimUnread Event, the classes the planner and the webhook
// cannot read, kubectl migflex explain) is what the scheduler finds: an
// expression that does not compile, a part of it that is false on every
// device of migflex's driver or fails on every one, and, on the devices
// of a ResourceSlice, which match and which make the scheduler fail.
//
// It is pure: no I/O. Work is bounded: an expression longer than the API
// allows is not compiled, every evaluation runs under the scheduler's cost
// limit, and compiled expressions are kept in a cache of bounded size.
package dracel

import (
	"context"
	"fmt"
	"slices"
	"strings"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/lru"

	"github.com/migflex/migflex/internal/platform/textcut"
)

// Driver is migflex's DRA driver, whose attributes the checks know; it is
// internal/domain/dra's DriverName (a test holds them equal).
const Driver = "gpu.migflex.io"

// driverAttributes are the attributes the driver publishes, every one a
// string (internal/domain/dra's APIDevice; a test holds them equal).
var driverAttributes = []string{"type", "uuid", "parentUUID", "profile", "productName"}

// MaxLength is the longest expression read: the API's limit
// (resourceapi.CELSelectorExpressionMaxLength). The API server refuses a
// longer one, so only a hostile or corrupt object has it.
const MaxLength = resourceapi.CELSelectorExpressionMaxLength

// QuoteLength bounds an expression quoted in a message.
const QuoteLength = 120

// features turn on every optional part of DRA's CEL environment: an
// expression that compiles with some feature gate on is never reported
// as a compile error. The scheduler of 1.37 has DRAConsumableCapacity on
// by default and DRAListTypeAttributes off; the API server compiles a new
// expression with its own gates and refuses one that does not compile.
var features = cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true}

// Kind says what is wrong with a selector.
type Kind string

const (
	// TooLong: longer than MaxLength; not compiled.
	TooLong Kind = "too long"
	// Compile: the scheduler cannot compile it and fails every claim or
	// class that has it.
	Compile Kind = "CEL compile error"
	// NeverTrue: a comparison in it is false on every device of the
	// driver (CEL's == between a string and an int is false, not an
	// error).
	NeverTrue Kind = "false on every device"
	// Fails: a part of it fails on every device of the driver that it is
	// evaluated on (an attribute the driver does not publish, a string
	// ordered against a number).
	Fails Kind = "fails on every device"
	// Runtime: it failed on one device.
	Runtime Kind = "CEL runtime error"
)

// Finding is one thing wrong with a selector.
type Finding struct {
	Kind Kind `json:"kind"`
	// Expression is the selector, cut to QuoteLength bytes.
	Expression string `json:"expression"`
	// Detail says what, in one line.
	Detail string `json:"detail"`
	// Device is the device a Runtime error happened on ("pool/device").
	Device string `json:"device,omitempty"`
}

// String is the finding in one line, with the expression quoted.
func (f Finding) String() string {
	q := "`" + f.Expression + "`"
	switch f.Kind {
	case TooLong:
		return "selector " + q + ": " + f.Detail
	case Compile:
		return "CEL compile error in " + q + ": " + f.Detail
	case Runtime:
		return "CEL runtime error in " + q + " on device " + f.Device + ": " + f.Detail
	}
	return q + ": " + f.Detail
}

// Quote cuts an expression for a message.
func Quote(expr string) string {
	return textcut.Bytes(strings.Join(strings.Fields(expr), " "), QuoteLength, "...")
}

// Checker compiles selectors as the scheduler does and keeps what it
// compiled, and what Check found. It is safe for concurrent use.
type Checker struct {
	cache *cel.Cache
	// checked are Check's findings by expression: the planner asks about
	// the same selectors every round.
	checked *lru.Cache
}

// NewChecker returns a Checker that keeps up to entries compiled
// expressions, and as many Check answers (at least 1).
func NewChecker(entries int) *Checker {
	return &Checker{cache: cel.NewCache(max(entries, 1), features), checked: lru.New(max(entries, 1))}
}

// compile is the scheduler's compilation of expr, or what keeps it from
// compiling.
func (c *Checker) compile(expr string) (cel.CompilationResult, *Finding) {
	if len(expr) > MaxLength {
		return cel.CompilationResult{}, &Finding{Kind: TooLong, Expression: Quote(expr),
			Detail: fmt.Sprintf("%d bytes, more than the API's %d: not read", len(expr), MaxLength)}
	}
	res := c.cache.GetOrCompile(expr)
	if res.Error != nil {
		return res, &Finding{Kind: Compile, Expression: Quote(expr), Detail: compileDetail(res.Error.Detail)}
	}
	return res, nil
}

// compileDetail is the first line of a CEL compile error, without the
// prefixes that say nothing ("compilation failed: ERROR: <input>:"): its
// position and message. The rest repeats the expression with a caret.
func compileDetail(d string) string {
	d, _, _ = strings.Cut(d, "\n")
	d = strings.TrimPrefix(d, "compilation failed: ")
	d = strings.TrimPrefix(d, "ERROR: ")
	d = strings.TrimPrefix(d, "<input>:")
	return textcut.Bytes(strings.TrimSpace(d), 300, "...")
}

// Check says what is wrong with expr whatever device it meets: it is too
// long, it does not compile, or a part of it is false or fails on every
// device of the driver. None: nothing found, which does not mean it
// selects anything.
func (c *Checker) Check(expr string) []Finding {
	if len(expr) <= MaxLength {
		if v, ok := c.checked.Get(expr); ok {
			return slices.Clone(v.([]Finding))
		}
	}
	var out []Finding
	if res, f := c.compile(expr); f != nil {
		out = []Finding{*f}
	} else if ast, iss := res.Environment.Compile(expr); iss.Err() == nil {
		out = lint(ast.NativeRep(), Quote(expr))
	}
	if len(expr) <= MaxLength {
		c.checked.Add(expr, slices.Clone(out))
	}
	return out
}

// lint finds, in a compiled expression, the parts that are false or fail
// on every device of the driver, whatever the rest says. They are facts
// about a part: `!(profile == 3)` is true everywhere, but `profile == 3`
// is still false everywhere, and said so.
func lint(a *celast.AST, quoted string) []Finding {
	var out []Finding
	guarded := map[string]bool{}
	var reads []string
	celast.PreOrderVisit(a.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if name, testOnly, ok := driverAttribute(e); ok {
			if testOnly {
				guarded[name] = true
			} else {
				reads = append(reads, name)
			}
			return
		}
		if e.Kind() != celast.CallKind {
			return
		}
		call := e.AsCall()
		op := call.FunctionName()
		if op == operators.OptSelect || op == operators.OptIndex {
			if args := call.Args(); len(args) == 2 && args[1].Kind() == celast.LiteralKind {
				if s, ok := args[1].AsLiteral().Value().(string); ok {
					guarded[s] = true
				}
			}
			return
		}
		cmp, isCmp := comparisons[op]
		if !isCmp || len(call.Args()) != 2 {
			return
		}
		for _, pair := range [][2]celast.Expr{{call.Args()[0], call.Args()[1]}, {call.Args()[1], call.Args()[0]}} {
			name, _, ok := driverAttribute(pair[0])
			if !ok || !slices.Contains(driverAttributes, name) || pair[1].Kind() != celast.LiteralKind {
				continue
			}
			lit := pair[1].AsLiteral()
			if lit.Type() == types.StringType {
				continue
			}
			text := fmt.Sprintf("%s %s %s", name, cmp.symbol, literalText(lit.Value()))
			typ := lit.Type().TypeName()
			if cmp.ordered {
				out = append(out, Finding{Kind: Fails, Expression: quoted,
					Detail: fmt.Sprintf("%s fails on every device that has a %s: it orders a string against %s %s (no such overload)", text, name, article(typ), typ)})
			} else {
				out = append(out, Finding{Kind: NeverTrue, Expression: quoted,
					Detail: fmt.Sprintf("%s is false on every device: %s is a string, %v %s %s, and CEL finds values of two types unequal", text, name, literalText(lit.Value()), article(typ), typ)})
			}
		}
	}))
	seen := map[string]bool{}
	for _, name := range reads {
		if slices.Contains(driverAttributes, name) || guarded[name] || seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, Finding{Kind: Fails, Expression: quoted,
			Detail: fmt.Sprintf("device.attributes[%q].%s fails on every device: %s publishes no attribute %s (it has %s; memory and engines are capacities)",
				Driver, name, Driver, name, strings.Join(driverAttributes, ", "))})
	}
	return out
}

// comparison is an operator whose operands lint checks: its symbol, and
// whether it orders (a string ordered against a number fails; == between
// them is false).
type comparison struct {
	symbol  string
	ordered bool
}

var comparisons = map[string]comparison{
	operators.Equals: {"==", false}, operators.Less: {"<", true}, operators.LessEquals: {"<=", true},
	operators.Greater: {">", true}, operators.GreaterEquals: {">=", true},
}

func article(typ string) string {
	if strings.ContainsAny(typ[:1], "aeiou") {
		return "an"
	}
	return "a"
}

func literalText(v any) string {
	switch v := v.(type) {
	case []byte:
		return fmt.Sprintf("b%q", v)
	case nil:
		return "null"
	}
	if s := fmt.Sprint(v); s != "" && s != "NULL_VALUE" {
		return s
	}
	return "null"
}

// driverAttribute tells whether e reads one of the driver's attributes,
// device.attributes["gpu.migflex.io"].name or ...["name"], and whether as
// a presence test (has()).
func driverAttribute(e celast.Expr) (name string, testOnly, ok bool) {
	var operand celast.Expr
	switch e.Kind() {
	case celast.SelectKind:
		s := e.AsSelect()
		operand, name, testOnly = s.Operand(), s.FieldName(), s.IsTestOnly()
	case celast.CallKind:
		c := e.AsCall()
		if c.FunctionName() != operators.Index || len(c.Args()) != 2 || c.Args()[1].Kind() != celast.LiteralKind {
			return "", false, false
		}
		s, isString := c.Args()[1].AsLiteral().Value().(string)
		if !isString {
			return "", false, false
		}
		operand, name = c.Args()[0], s
	default:
		return "", false, false
	}
	// operand must be device.attributes["gpu.migflex.io"].
	if operand.Kind() != celast.CallKind {
		return "", false, false
	}
	c := operand.AsCall()
	if c.FunctionName() != operators.Index || len(c.Args()) != 2 || c.Args()[1].Kind() != celast.LiteralKind {
		return "", false, false
	}
	if d, _ := c.Args()[1].AsLiteral().Value().(string); d != Driver {
		return "", false, false
	}
	m := c.Args()[0]
	if m.Kind() != celast.SelectKind || m.AsSelect().FieldName() != "attributes" {
		return "", false, false
	}
	if d := m.AsSelect().Operand(); d.Kind() != celast.IdentKind || d.AsIdent() != "device" {
		return "", false, false
	}
	return name, testOnly, true
}

// Device is one device a selector is evaluated on.
type Device struct {
	// Name says which, in messages: "pool/device".
	Name   string
	Driver string
	// Device is the device as its ResourceSlice publishes it.
	Device *resourceapi.Device
}

// Match tells whether every selector holds on d, as the scheduler
// evaluates them: in order, the first false one ending it. A finding says
// why the scheduler would fail instead (a compile error, a runtime error
// on d).
func (c *Checker) Match(ctx context.Context, exprs []string, d Device) (bool, *Finding) {
	for _, expr := range exprs {
		res, f := c.compile(expr)
		if f != nil {
			return false, f
		}
		ok, _, err := res.DeviceMatches(ctx, cel.Device{Driver: d.Driver, AllowMultipleAllocations: d.Device.AllowMultipleAllocations,
			Attributes: d.Device.Attributes, Capacity: d.Device.Capacity})
		if err != nil {
			return false, &Finding{Kind: Runtime, Expression: Quote(expr), Device: d.Name,
				Detail: textcut.Bytes(cel.EnhanceRuntimeError(err).Error(), 300, "...")}
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}
