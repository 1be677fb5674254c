package sim

import "time"

// SetSleep replaces how l spends Config.OperationDelay, so a test sees the
// delays without reading a clock. Call it before l is used.
func SetSleep(l *Lib, sleep func(time.Duration)) { l.sleep = sleep }

// Held is how many changes wait for Config.HoldFile.
func Held(l *Lib) int {
	if l.hold == nil {
		return 0
	}
	return int(l.hold.waiting.Load())
}
