package mysql_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A table's character sets change under the reader: a latin1 table gains
// a column (latin1, the table's default), is converted to utf8mb4
// (CONVERT TO CHARACTER SET: every character column recoded, the types
// unchanged), gains a column (now utf8mb4), has its default set back to
// latin1 (no column changes) and gains one more (latin1). Every value,
// read live and read again from behind every change (when the catalog's
// default is latin1 again), is the text written: none decoded with
// another column's or another time's character set.
func TestCharacterSetChangesAreFollowedLiveAndFromBehind(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "notes", nil, "CREATE TABLE notes (id BIGINT PRIMARY KEY, memo VARCHAR(20)) DEFAULT CHARSET=latin1")
	dsn, cfg, first, live := up.dsn, up.cfg, up.first, up.log
	for _, step := range [][]string{
		{"INSERT INTO notes VALUES (1, 'café')"},
		{"ALTER TABLE notes ADD COLUMN tag VARCHAR(10)", "INSERT INTO notes VALUES (2, 'über', 'ñ')"},
		{"ALTER TABLE notes CONVERT TO CHARACTER SET utf8mb4", "INSERT INTO notes VALUES (3, 'naïve ✓', '✓')"},
		{"ALTER TABLE notes ADD COLUMN x VARCHAR(5)", "INSERT INTO notes VALUES (4, 'a', 'b', 'é✓')"},
		{"ALTER TABLE notes CHARACTER SET latin1", "ALTER TABLE notes ADD COLUMN y VARCHAR(5)", "INSERT INTO notes VALUES (5, 'a', 'b', 'c', 'ß')"},
		{"UPDATE notes SET memo = '日本', tag = 'ø' WHERE id = 1"},
	} {
		exec(t, dsn, step...)
		waitResolved(t, live)
	}
	want := strings.Join([]string{
		"INSERT [1 café]",
		"INSERT [2 über ñ]",
		"INSERT [3 naïve ✓ ✓]",
		"INSERT [4 a b é✓]",
		"INSERT [5 a b c ß]",
		"UPDATE [1 日本 ø NULL NULL]",
	}, "\n")
	if got := live.lines(t, false); got != want {
		t.Fatalf("read live:\n%s\nwant\n%s", got, want)
	}
	other := cfg
	other.ServerID = 78
	behind := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), first)
	waitResolved(t, behind)
	if got := behind.lines(t, false); got != want {
		t.Fatalf("read from behind every change:\n%s\nwant\n%s", got, want)
	}
}

// A statement the schema history does not follow (CONVERT TO CHARACTER
// SET) makes the table's next row read the catalog. That mark was the
// reader's memory only: a reader started again after the statement
// decoded the rows after it in the old character set ("cafÃ©"), and so
// did one that met another ALTER, which the history followed, before
// the next row (applied to the definition from before the CONVERT).
func TestACharacterSetChangeNotFollowedSurvivesARestartAndAnotherAlter(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "notes,other", nil, "CREATE TABLE notes (id BIGINT PRIMARY KEY, memo VARCHAR(20)) DEFAULT CHARSET=latin1", "CREATE TABLE other (id INT PRIMARY KEY)")
	dsn, cfg, live := up.dsn, up.cfg, up.log
	exec(t, dsn, "INSERT INTO notes VALUES (1, 'café')", "ALTER TABLE notes CONVERT TO CHARACTER SET utf8mb4", "INSERT INTO other VALUES (1)")
	waitResolved(t, live)
	_, resolved, _ := live.state()
	afterConvert, ok := up.p.ResumePoint(resolved)
	if !ok {
		t.Fatal("no resume point after the CONVERT")
	}
	exec(t, dsn, "INSERT INTO notes VALUES (2, 'naïve')",
		"ALTER TABLE notes CONVERT TO CHARACTER SET latin1", "ALTER TABLE notes ADD COLUMN tag VARCHAR(10)",
		"INSERT INTO notes VALUES (3, 'ß', 'ø')")
	waitResolved(t, live)
	notes := func(c *collected) string {
		var out []string
		for _, l := range strings.Split(c.lines(t, false), "\n") {
			if l != "INSERT [1]" { // other's row
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	want := "INSERT [1 café]\nINSERT [2 naïve]\nINSERT [3 ß ø]"
	if got := notes(live); got != want {
		t.Fatalf("read live:\n%s\nwant\n%s", got, want)
	}
	other := cfg
	other.ServerID = 79
	again := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), afterConvert)
	waitResolved(t, again)
	if got := notes(again); got != "INSERT [2 naïve]\nINSERT [3 ß ø]" {
		t.Fatalf("read again from after the CONVERT:\n%s", got)
	}
}

// Columns in the character sets legacy schemas still use arrive as the
// server shows them (in UTF-8), not as their bytes in the binary log: a
// cp1251 'Ж' was the byte 0xC6 in the sink. Each set's text is one the
// set can write; a key in one of them (cp1251) too.
func TestEveryCharacterSetArrivesAsTheServerShowsIt(t *testing.T) {
	t.Parallel()
	sets := []struct{ set, text string }{
		{"cp1251", "Жёлтый"}, {"koi8r", "Привет"}, {"koi8u", "Ґанок"}, {"cp866", "Щука"},
		{"latin2", "Žluťoučký kůň"}, {"cp1250", "Łódź „ok”"}, {"latin5", "Ğüşiöç"}, {"latin7", "Ąčęėįšųūž"},
		{"greek", "Καλημέρα"}, {"hebrew", "שלום"}, {"cp1256", "مرحبا"}, {"cp1257", "Ąčę"}, {"cp850", "Ñandú"}, {"cp852", "Źdźbło"},
		{"gbk", "中文测试"}, {"gb2312", "简体中文"}, {"big5", "繁體中文"}, {"sjis", "日本語テキスト"}, {"cp932", "①日本"},
		{"ujis", "ひらがな"}, {"eucjpms", "カタカナ"}, {"euckr", "한국어"}, {"ucs2", "Ωmega ✓"}, {"utf16", "𝄞 music"},
		{"utf16le", "ünïcödé"}, {"utf32", "😀 grin"}, {"ascii", "plain"}, {"tis620", "ภาษาไทย"}, {"macroman", "Café ∂"},
	}
	var cols, vals []string
	for i, s := range sets {
		cols = append(cols, fmt.Sprintf("c%d VARCHAR(40) CHARACTER SET %s", i, s.set))
		vals = append(vals, "'"+s.text+"'")
	}
	// With binlog_row_metadata=FULL the sets come from the rows' table
	// maps (collation ids), otherwise from the catalog.
	for _, meta := range []string{"FULL", "MINIMAL"} {
		t.Run(meta, func(t *testing.T) {
			up := followFrom(t, "legacy", []string{"--binlog-row-metadata=" + meta}, "CREATE TABLE legacy (k VARCHAR(20) CHARACTER SET cp1251 PRIMARY KEY, "+strings.Join(cols, ", ")+")")
			exec(t, up.dsn, "INSERT INTO legacy VALUES ('Ключ', "+strings.Join(vals, ", ")+")",
				"INSERT INTO legacy (k, c0) VALUES ('ascii', 'Ё')",
				"UPDATE legacy SET c14 = '更新' WHERE k = 'Ключ'")
			readAsTheServerShows(t, up, "legacy")
			// Converted since: a reader from behind decodes the rows
			// before in their own sets, though the catalog shows utf8mb4.
			exec(t, up.dsn, "ALTER TABLE legacy CONVERT TO CHARACTER SET utf8mb4", "INSERT INTO legacy (k, c0, c14) VALUES ('после', 'ё', '后')")
			other := up.cfg
			other.ServerID = 79
			behind := up
			behind.log = pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), up.first)
			readAsTheServerShows(t, behind, "legacy")
		})
	}
}

// Columns in MariaDB's uca1400 collations (10.10 and later; no row of
// COLLATIONS names them, and setsByCollation has none of their ids)
// arrive as the server shows them, in a ucs2, utf16 or utf32 column
// too, with binlog_row_metadata=FULL or without.
func TestUCA1400CollationsArriveAsTheServerShowsThem(t *testing.T) {
	t.Parallel()
	sets := []struct{ set, text string }{
		{"ucs2", "Ωmega ✓"}, {"utf16", "𝄞 music"}, {"utf32", "😀 grin"}, {"utf8mb3", "Ĳssel"}, {"utf8mb4", "🙂 smile"},
	}
	var cols, vals []string
	for i, s := range sets {
		cols = append(cols, fmt.Sprintf("c%d VARCHAR(40) CHARACTER SET %s COLLATE %s_uca1400_ai_ci", i, s.set, s.set))
		vals = append(vals, "'"+s.text+"'")
	}
	srv, dsn := mysqltest.Start(t, "probe")
	if _, err := mysqltest.Open(t, dsn).Exec("CREATE TABLE probe (s VARCHAR(1)) COLLATE utf8mb4_uca1400_ai_ci"); err != nil {
		t.Skipf("no uca1400 collations on this server (MariaDB 10.10+): %v", err)
	}
	_ = srv.Stop()
	for _, meta := range []string{"FULL", "MINIMAL"} {
		t.Run(meta, func(t *testing.T) {
			up := followFrom(t, "uca", []string{"--binlog-row-metadata=" + meta}, "CREATE TABLE uca (k INT PRIMARY KEY, "+strings.Join(cols, ", ")+") COLLATE utf8mb4_uca1400_ai_ci")
			exec(t, up.dsn, "INSERT INTO uca VALUES (1, "+strings.Join(vals, ", ")+")", "INSERT INTO uca (k, c4) VALUES (2, 'Grüße')")
			readAsTheServerShows(t, up, "uca")
		})
	}
}
