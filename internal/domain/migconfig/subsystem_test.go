package migconfig

import "github.com/migflex/migflex/internal/domain/mig"

// withSubsystem gives g a PCI subsystem id.
func withSubsystem(g mig.GPU, sub uint32) mig.GPU {
	g.PCISubsystemID = sub
	return g
}

// subsystemOf is g's PCI subsystem id.
func subsystemOf(g mig.GPU) uint32 { return g.PCISubsystemID }
