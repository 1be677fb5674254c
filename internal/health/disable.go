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
