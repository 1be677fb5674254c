package report

import (
	"fmt"
	"time"
)

// Duration formats d with three significant digits in a readable unit.
func Duration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return sig(float64(d)/float64(time.Millisecond)) + "ms"
	default:
		return sig(d.Seconds()) + "s"
	}
}

func sig(f float64) string {
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f >= 10:
		return fmt.Sprintf("%.1f", f)
	default:
		return fmt.Sprintf("%.2f", f)
	}
}
