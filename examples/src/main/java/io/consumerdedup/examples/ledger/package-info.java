/** The demo's side effects, real and countable: ledger rows and account balances in PostgreSQL. */
@NullMarked
package io.consumerdedup.examples.ledger;

import org.jspecify.annotations.NullMarked;
