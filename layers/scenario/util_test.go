package scenario

import "strconv"

func strconvF(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
