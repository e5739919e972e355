package io.consumerdedup.examples.ledger;

/**
 * A side effect a consumer applies once per business action: what it writes, and to which account.
 */
public enum EffectKind {
  /** The payment consumer charges the customer's card. */
  CHARGE("charges", "alice:card", -25_00, 100_00, true),
  /** The points service awards loyalty points for a payment. */
  POINTS("points", "alice:points", 100, 0, false),
  /** The coupon service issues a coupon for a payment. */
  COUPON("coupons", "alice:coupons", 1, 0, false);

  private final String plural;
  private final String account;
  private final long amount;
  private final long openingBalance;
  private final boolean money;

  EffectKind(String plural, String account, long amount, long openingBalance, boolean money) {
    this.plural = plural;
    this.account = account;
    this.amount = amount;
    this.openingBalance = openingBalance;
    this.money = money;
  }

  /** The column heading in the report, such as {@code charges}. */
  public String plural() {
    return plural;
  }

  public String account() {
    return account;
  }

  /** Added to the account by each application: negative for a charge. */
  public long amount() {
    return amount;
  }

  public long openingBalance() {
    return openingBalance;
  }

  /** The account balance after {@code applications} applications. */
  public long balanceAfter(int applications) {
    return openingBalance + amount * applications;
  }

  /** A balance as the report shows it: money in cents as {@code 75.00}, points as a count. */
  public String format(long balance) {
    if (!money) {
      return Long.toString(balance);
    }
    return String.format(
        "%s%d.%02d", balance < 0 ? "-" : "", Math.abs(balance) / 100, Math.abs(balance) % 100);
  }
}
