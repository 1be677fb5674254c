package dra

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// The DeviceClasses that are not per profile. Their names parallel NVIDIA's
// gpu.nvidia.com and mig.nvidia.com, so claims move over by a domain.
const (
	// ClassAll selects every device of the driver, MIG or whole GPU: for
	// claims that choose by CEL alone (memory, profile, product).
	ClassAll = "migflex.io"
	// ClassGPU selects whole GPUs and serves nvidia.com/gpu.
	ClassGPU = "gpu.migflex.io"
	// ClassMIG selects every MIG device, whatever its profile.
	ClassMIG = "mig.migflex.io"
)

// ProfileClass is the DeviceClass that selects MIG devices of one profile
// and serves its resource: mig-1g.10gb.me.migflex.io serves
// nvidia.com/mig-1g.10gb.me.
func ProfileClass(profile string) string {
	return "mig-" + strings.ToLower(resourcename.Suffix(profile)) + ".migflex.io"
}

// DeviceClasses returns the general classes and one class per profile,
// sorted by profile, whose extendedResourceName lets a pod that asks for
// nvidia.com/mig-<profile> (or nvidia.com/gpu) unchanged be served by this
// driver. Only one DeviceClass in a cluster may name a given extended
// resource, so NVIDIA's gpu.nvidia.com class (which names nvidia.com/gpu
// too) must not be installed beside these.
func DeviceClasses(profiles []string) ([]resourceapi.DeviceClass, error) {
	attr := func(name string) string { return fmt.Sprintf("device.attributes[%q].%s", DriverName, name) }
	driver := fmt.Sprintf("device.driver == %q", DriverName)
	class := func(name, expr, resource string) resourceapi.DeviceClass {
		c := resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/part-of": "migflex"}},
			Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
		}
		if resource != "" {
			c.Spec.ExtendedResourceName = ptr.To(resource)
		}
		return c
	}
	out := []resourceapi.DeviceClass{
		class(ClassAll, driver, ""),
		class(ClassGPU, fmt.Sprintf("%s && %s == %q", driver, attr(AttrType), TypeGPU), string(resourcename.GPU)),
		class(ClassMIG, fmt.Sprintf("%s && %s == %q", driver, attr(AttrType), TypeMIG), ""),
	}
	profiles = slices.Clone(profiles)
	slices.Sort(profiles)
	profiles = slices.Compact(profiles)
	names := map[string]string{}
	for _, p := range profiles {
		if _, ok := resourcename.ParseMIG(resourcename.MIG(p)); !ok {
			return nil, fmt.Errorf("profile %q: %s is not a MIG resource name", p, resourcename.MIG(p))
		}
		name := ProfileClass(p)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return nil, fmt.Errorf("profile %q: class name %q: %s", p, name, strings.Join(errs, "; "))
		}
		if other, ok := names[name]; ok {
			return nil, fmt.Errorf("profiles %q and %q have one class name %q", other, p, name)
		}
		names[name] = p
		out = append(out, class(name,
			fmt.Sprintf("%s && %s == %q && %s == %q", driver, attr(AttrType), TypeMIG, attr(AttrProfile), p),
			string(resourcename.MIG(p))))
	}
	return out, nil
}

// DeviceClassesYAML is DeviceClasses as a multi-document YAML stream,
// headed by the given comment lines.
func DeviceClassesYAML(profiles []string, header ...string) ([]byte, error) {
	classes, err := DeviceClasses(profiles)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, h := range header {
		fmt.Fprintf(&b, "# %s\n", h)
	}
	for _, c := range classes {
		y, err := yaml.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("DeviceClass %s: %w", c.Name, err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}
