//go:build !unix

package main

import "os"

// ttyColumns returns 0: the terminal's width is not read on this system
// (COLUMNS still sets it).
func ttyColumns(*os.File) int { return 0 }
