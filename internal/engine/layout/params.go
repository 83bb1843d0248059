package layout

import "unicode/utf16"

// SplitParams splits s into chunks of at most ParamsChunkUnits UTF-16 units
// each, at rune boundaries (a row's Params, Params1, … properties); ok is
// false when it takes more than MaxParamsChunks.
func SplitParams(s string) (chunks []string, ok bool) {
	start, units := 0, 0
	for i, r := range s {
		n := utf16.RuneLen(r)
		if n < 0 {
			n = 1
		}
		if units+n > ParamsChunkUnits {
			chunks = append(chunks, s[start:i])
			start, units = i, 0
		}
		units += n
	}
	chunks = append(chunks, s[start:])
	return chunks, len(chunks) <= MaxParamsChunks
}
