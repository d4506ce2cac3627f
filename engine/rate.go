package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is how many syncs may start per period, fleet-wide: "20/s",
// "100/m", "5000/h". The zero Rate is no limit.
type Rate struct {
	N   int
	Per time.Duration
}

// RateMax bounds a Rate: a million syncs a second is beyond what any one
// Redis can admit, so a larger figure is a typo.
const RateMax = 1_000_000 // per second

// ParseRate reads a Rate: a positive integer, a slash and a unit, s, m or
// h ("20/s"). The empty string is the zero Rate.
func ParseRate(s string) (Rate, error) {
	if s == "" {
		return Rate{}, nil
	}
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, fmt.Errorf("%q is not a rate: want a count per unit, such as \"20/s\", \"100/m\" or \"5000/h\"", s)
	}
	per, ok := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[strings.TrimSpace(unit)]
	if !ok {
		return Rate{}, fmt.Errorf("%q: the unit must be s, m or h", s)
	}
	num = strings.TrimSpace(num)
	n, err := strconv.Atoi(num)
	if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(num, "-") {
		// Past an int: it said "must be a whole number of at least 1".
		return Rate{}, fmt.Errorf("%q is too large (at most %d/s)", s, RateMax)
	}
	if err != nil || n < 1 {
		return Rate{}, fmt.Errorf("%q: the count must be a whole number of at least 1", s)
	}
	r := Rate{N: n, Per: per}
	if r.PerSecond() > RateMax {
		return Rate{}, fmt.Errorf("%q is above %d/s", s, RateMax)
	}
	return r, nil
}

// String is the rate as ParseRate reads it.
func (r Rate) String() string {
	if r.N == 0 {
		return ""
	}
	u := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h"}[r.Per]
	if u == "" {
		return strconv.Itoa(r.N) + "/" + r.Per.String()
	}
	return strconv.Itoa(r.N) + "/" + u
}

// PerSecond is the rate in syncs per second.
func (r Rate) PerSecond() float64 {
	if r.Per <= 0 {
		return 0
	}
	return float64(r.N) / r.Per.Seconds()
}

// every is the time between two starts at the rate.
func (r Rate) every() time.Duration {
	if r.N <= 0 {
		return 0
	}
	return r.Per / time.Duration(r.N)
}

func (r Rate) validate() error {
	switch {
	case r == Rate{}:
		return nil
	case r.N < 1 || r.Per <= 0:
		return errors.New("count and period must be positive")
	case r.PerSecond() > RateMax:
		return fmt.Errorf("%s is above %d/s", r, RateMax)
	}
	return nil
}
