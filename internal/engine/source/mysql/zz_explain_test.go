package mysql

import (
	"testing"
)

func TestZZExplain(t *testing.T) {
	_, db := startShopDB(t)
	if _, err := db.Exec(`CREATE TABLE bench (id BIGINT PRIMARY KEY, v VARCHAR(40), n DECIMAL(12,2), at DATETIME(6), flag TINYINT)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO bench SELECT seq, MD5(seq), seq / 7.0, NOW(6), seq % 2 FROM seq_1_to_200000`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"EXPLAIN SELECT `id`, `v`, `n`, `at`, `flag` FROM `shop`.`bench` WHERE (`id`) >= (50001) AND (`id`) < (100001) ORDER BY `id` LIMIT 41527",
		"EXPLAIN SELECT `id`, `v`, `n`, `at`, `flag` FROM `shop`.`bench` WHERE (`id`) > (50001) ORDER BY `id` LIMIT 41527",
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			rows.Scan(ptrs...)
			line := ""
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					line += cols[i] + "=" + string(b) + " "
				}
			}
			t.Log(line)
		}
		rows.Close()
	}
}
