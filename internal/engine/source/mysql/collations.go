package mysql

// setsByCollation names the character set of each collation id a table
// map carries (binlog_row_metadata=FULL): MariaDB 10.11's
// information_schema.COLLATIONS, and MySQL 8's ids MariaDB does not use
// (gb18030's 248-250, utf8mb4's 255-323). A row's character columns are
// decoded in the set it was written in, which the catalog may no longer
// show (a CONVERT TO CHARACTER SET since).
// collationSet names the character set of collation id: setsByCollation's,
// or, for a MariaDB 10.10+ uca1400 collation (absent from COLLATIONS, so
// from that map), its set by the id's block of 256: utf8mb3 from 2048,
// utf8mb4 from 2304, ucs2 from 2560, utf16 from 2816, utf32 from 3072
// (TestUCA1400CollationIDsNameTheirSets checks them against the
// server's). A ucs2, utf16 or utf32 column in such a collation was taken
// for UTF-8 where a row's table map named its set.
func collationSet(id uint64) (string, bool) {
	if cs, ok := setsByCollation[id]; ok {
		return cs, true
	}
	switch id >> 8 {
	case 8, 9: // utf8mb3, utf8mb4: named utf8mb4, as the map names them
		return "utf8mb4", true
	case 10:
		return "ucs2", true
	case 11:
		return "utf16", true
	case 12:
		return "utf32", true
	}
	return "", false
}

var setsByCollation = func() map[uint64]string {
	m := map[uint64]string{}
	for set, ids := range map[string][]uint64{
		"armscii8": {32, 64, 1056, 1088},
		"ascii":    {11, 65, 1035, 1089},
		"big5":     {1, 84, 1025, 1108},
		"binary":   {63},
		"cp1250":   {26, 34, 44, 66, 99, 1050, 1090},
		"cp1251":   {14, 23, 50, 51, 52, 1074, 1075},
		"cp1256":   {57, 67, 1081, 1091},
		"cp1257":   {29, 58, 59, 1082, 1083},
		"cp850":    {4, 80, 1028, 1104},
		"cp852":    {40, 81, 1064, 1105},
		"cp866":    {36, 68, 1060, 1092},
		"cp932":    {95, 96, 1119, 1120},
		"dec8":     {3, 69, 1027, 1093},
		"eucjpms":  {97, 98, 1121, 1122},
		"euckr":    {19, 85, 1043, 1109},
		"gb18030":  {248, 249, 250},
		"gb2312":   {24, 86, 1048, 1110},
		"gbk":      {28, 87, 1052, 1111},
		"geostd8":  {92, 93, 1116, 1117},
		"greek":    {25, 70, 1049, 1094},
		"hebrew":   {16, 71, 1040, 1095},
		"hp8":      {6, 72, 1030, 1096},
		"keybcs2":  {37, 73, 1061, 1097},
		"koi8r":    {7, 74, 1031, 1098},
		"koi8u":    {22, 75, 1046, 1099},
		"latin1":   {5, 8, 15, 31, 47, 48, 49, 94, 1032, 1071},
		"latin2":   {2, 9, 21, 27, 77, 1033, 1101},
		"latin5":   {30, 78, 1054, 1102},
		"latin7":   {20, 41, 42, 79, 1065, 1103},
		"macce":    {38, 43, 1062, 1067},
		"macroman": {39, 53, 1063, 1077},
		"sjis":     {13, 88, 1037, 1112},
		"swe7":     {10, 82, 1034, 1106},
		"tis620":   {18, 89, 1042, 1113},
		"ucs2":     {35, 90, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 159, 640, 641, 642, 1059, 1114, 1152, 1174},
		"ujis":     {12, 91, 1036, 1115},
		"utf16":    {54, 55, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 672, 673, 674, 1078, 1079, 1125, 1147},
		"utf16le":  {56, 62, 1080, 1086},
		"utf32":    {60, 61, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 736, 737, 738, 1084, 1085, 1184, 1206},
		"utf8mb3":  {33, 83, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 223, 576, 577, 578, 1057, 1107, 1216, 1238},
		"utf8mb4":  {45, 46, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247, 255, 256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289, 290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321, 322, 323, 608, 609, 610, 1069, 1070, 1248, 1270},
	} {
		for _, id := range ids {
			m[id] = utf8As4(set)
		}
	}
	return m
}()
