package migconfig

import (
	"fmt"
	"regexp"
	"strings"
)

// profileName is <compute slices>g.<memory>gb followed by optional attribute
// suffixes: "+me", "+me.all", "+gfx", "-me".
var profileName = regexp.MustCompile(`^[1-9][0-9]{0,2}g\.[1-9][0-9]{0,4}gb([+-][a-z][a-z0-9]*(\.[a-z][a-z0-9]*)*)*$`)

// computeInstanceName is mig-parted's <c>c.<g>g.<m>gb form.
var computeInstanceName = regexp.MustCompile(`^[0-9]+c\.[0-9]+g\.[0-9]+gb`)

// checkProfileName checks the syntax of a profile name. Whether a GPU
// supports it is left to Validate.
func checkProfileName(name string) error {
	if len(name) <= maxQuoted && profileName.MatchString(name) {
		return nil
	}
	switch {
	case name == "":
		return fmt.Errorf("empty profile name")
	case len(name) > maxQuoted:
		return fmt.Errorf("profile %s: longer than %d characters", quote(name), maxQuoted)
	case computeInstanceName.MatchString(name):
		return fmt.Errorf("profile %s: compute-instance profiles are not supported; migflex gives each GPU instance one compute instance spanning it, so name the GPU-instance profile (e.g. %s)", quote(name), quote(name[strings.Index(name, ".")+1:]))
	case profileName.MatchString(strings.ToLower(name)):
		return fmt.Errorf("profile %s: profile names are lower case (%s)", quote(name), quote(strings.ToLower(name)))
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("profile %s: leading or trailing spaces", quote(name))
	}
	return fmt.Errorf("profile %s: not a MIG profile name (want <n>g.<m>gb with optional attributes, e.g. 2g.20gb, 1g.10gb+me, 1g.24gb-me)", quote(name))
}
