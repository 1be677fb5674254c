package migconfig

import "github.com/migflex/migflex/internal/mig"

// withSubsystem gives g a PCI subsystem id; mig.GPU has none yet.
func withSubsystem(g mig.GPU, _ uint32) mig.GPU { return g }

// subsystemOf is g's PCI subsystem id; mig.GPU has none yet.
func subsystemOf(mig.GPU) uint32 { return 0 }
