package postgres

import "encoding/binary"

// encodeTuple writes a TupleData: each column nil (NULL), "\x00u" (an
// unchanged TOAST value) or its text.
func encodeTuple(cols []*string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(cols)))
	for _, c := range cols {
		switch {
		case c == nil:
			b = append(b, 'n')
		case *c == "\x00u":
			b = append(b, 'u')
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(*c)))
			b = append(b, *c...)
		}
	}
	return b
}

func rowMessageBytes(kind byte, rel uint32, old byte, oldT, newT []*string) []byte {
	b := append([]byte{kind}, binary.BigEndian.AppendUint32(nil, rel)...)
	if old != 0 {
		b = append(b, old)
		b = append(b, encodeTuple(oldT)...)
	}
	if kind != 'D' {
		b = append(b, 'N')
		b = append(b, encodeTuple(newT)...)
	}
	return b
}
