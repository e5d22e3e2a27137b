package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock/fence"
	_ "modernc.org/sqlite"
)

// A business table carries a fence column; each write claims the row with
// the lock's fencing token in the same transaction. A holder whose lock
// passed to a newer holder (token 8 after 9) is refused, and its
// transaction writes nothing.
func ExampleTable_Claim() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", filepath.Join(dir, "shop.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE products (id INTEGER PRIMARY KEY, stock INTEGER NOT NULL,
		fence INTEGER NOT NULL DEFAULT 0)`); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO products (id, stock) VALUES (7, 100)`); err != nil {
		fmt.Println(err)
		return
	}
	products, err := fence.NewTable(fence.SQLite, "products", "fence", "id")
	if err != nil {
		fmt.Println(err)
		return
	}

	// sell runs under the product's lock; token is the lock's Fence().
	sell := func(token int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := products.Claim(ctx, tx, token, 7); err != nil {
			return err // a newer holder has written the row: roll back
		}
		if _, err := tx.ExecContext(ctx, `UPDATE products SET stock = stock - 1 WHERE id = 7`); err != nil {
			return err
		}
		return tx.Commit()
	}
	fmt.Println("token 9:", sell(9))
	err = sell(8)
	fmt.Println("token 8 refused:", errors.Is(err, fence.ErrStale))
	fmt.Println(err)
	var stock int
	if err := db.QueryRowContext(ctx, `SELECT stock FROM products WHERE id = 7`).Scan(&stock); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("stock:", stock)
	// Output:
	// token 9: <nil>
	// token 8 refused: true
	// fence: stale fencing token 8 for "products(id=7)": the store has accepted 9
	// stock: 99
}
