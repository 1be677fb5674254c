package health

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseDisable reads the value of the DP_DISABLE_HEALTHCHECKS-style switch
// the NVIDIA device plugin made familiar: "" keeps checks on, "all" or
// "xids" turns them off, and a comma-separated list of Xids keeps checks on
// but ignores those Xids in addition to the defaults.
func ParseDisable(value string) (disabled bool, extraIgnored []uint64, err error) {
	v := strings.TrimSpace(value)
	switch strings.ToLower(v) {
	case "":
		return false, nil, nil
	case "all", "xids":
		return true, nil, nil
	}
	for _, field := range strings.Split(v, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		xid, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return false, nil, fmt.Errorf("health checks switch %q: %q is neither \"all\", \"xids\" nor an Xid number", value, field)
		}
		extraIgnored = append(extraIgnored, xid)
	}
	return false, extraIgnored, nil
}

// ParseXids reads a comma-separated list of Xids. The result is never nil:
// Options reads nil as "the defaults" and an empty list as "none".
func ParseXids(s string) ([]uint64, error) {
	out := []uint64{}
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		xid, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %q is not an Xid (a non-negative integer)", s, field)
		}
		out = append(out, xid)
	}
	return out, nil
}

// FormatXids is the list form ParseXids reads: "13,31,43".
func FormatXids(xids []uint64) string {
	parts := make([]string, len(xids))
	for i, x := range xids {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(parts, ",")
}
