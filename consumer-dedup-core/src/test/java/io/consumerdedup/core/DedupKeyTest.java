package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class DedupKeyTest {

  @Test
  void aShortKeyIsStoredAsItIs() {
    DedupKey key = DedupKey.of("payment", "ORD-2026-0001");

    assertThat(key.bizType()).isEqualTo("payment");
    assertThat(key.bizKey()).isEqualTo("ORD-2026-0001");
    assertThat(key.isHashed()).isFalse();
    assertThat(key).hasToString("payment/ORD-2026-0001");
  }

  @Test
  void aKeyOfExactly256CharactersIsKeptAndOneMoreIsHashed() {
    String exact = "k".repeat(256);

    assertThat(DedupKey.of("payment", exact).bizKey()).isEqualTo(exact);
    DedupKey longer = DedupKey.of("payment", exact + "k");
    assertThat(longer.bizKey()).startsWith("sha256:").hasSize(7 + 64);
    assertThat(longer.isHashed()).isTrue();
  }

  @Test
  void onlySha256And64LowercaseHexDigitsIsTheHashedForm() {
    String hashed = DedupKey.of("payment", "k".repeat(257)).bizKey();

    assertThat(DedupKey.isHashedForm(hashed)).isTrue();
    assertThat(DedupKey.isHashedForm(hashed.toUpperCase(java.util.Locale.ROOT))).isFalse();
    assertThat(DedupKey.isHashedForm(hashed.substring(0, 70))).isFalse();
    assertThat(DedupKey.isHashedForm(hashed.replace("sha256:", "sha512:"))).isFalse();
    assertThat(DedupKey.isHashedForm("sha256:" + "g".repeat(64))).isFalse();
  }

  @Test
  void twoLongKeysWithACommonPrefixStayDistinct() {
    String prefix = "callback-".repeat(40); // 360 chars in common
    DedupKey first = DedupKey.of("callback", prefix + "txn-1");
    DedupKey second = DedupKey.of("callback", prefix + "txn-2");

    assertThat(first.bizKey()).isNotEqualTo(second.bizKey());
    assertThat(DedupKey.of("callback", prefix + "txn-1")).isEqualTo(first);
  }

  @Test
  void lengthIsCountedInCharactersAsThePostgresColumnDoes() {
    String emoji = "\uD83D\uDCB3".repeat(256); // 256 characters, 512 UTF-16 units

    assertThat(DedupKey.of("payment", emoji).bizKey()).isEqualTo(emoji);
  }

  @Test
  void aHashedKeyIsTheSha256OfTheUtf8Bytes() {
    // computed outside Java: printf 'a%.0s' $(seq 1 257) | sha256sum
    assertThat(DedupKey.of("t", "a".repeat(257)).bizKey())
        .isEqualTo("sha256:e8d95cc2b4bc198c54b40bd214df958afb65f5e73d2c2eafe0593cf5c635c1f0");
  }

  @ParameterizedTest
  @ValueSource(strings = {"", " ", "\t  "})
  void blankPartsAreRefusedNamingThePart(String blank) {
    assertThatThrownBy(() -> DedupKey.of(blank, "k"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("bizType must not be blank");
    assertThatThrownBy(() -> DedupKey.of("payment", blank))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("bizKey must not be blank");
  }

  @Test
  void nullPartsAreRefusedNamingThePart() {
    assertThatThrownBy(() -> DedupKey.of(null, "k"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("bizType must not be null");
    assertThatThrownBy(() -> DedupKey.of("payment", null))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("bizKey must not be null");
  }

  @Test
  void nulAndControlCharactersAreRefusedWithTheirPosition() {
    assertThatThrownBy(() -> DedupKey.of("payment", "ORD\u00001"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("bizKey must not contain a NUL character (at index 3)");
    assertThatThrownBy(() -> DedupKey.of("payment", "ORD\n1"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("bizKey must not contain control characters (U+000A at index 3)");
    assertThatThrownBy(() -> DedupKey.of("pay\u001bment", "1"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("bizType must not contain control characters (U+001B");
  }

  @Test
  void anUnpairedSurrogateIsRefusedRatherThanStoredAsAQuestionMark() {
    assertThatThrownBy(() -> DedupKey.of("payment", "ORD-\uD83D"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("bizKey must be valid text: unpaired surrogate at index 4");
  }

  @Test
  void aBizTypeOver64CharactersIsRefusedNotHashed() {
    assertThat(DedupKey.of("t".repeat(64), "k").bizType()).hasSize(64);
    assertThatThrownBy(() -> DedupKey.of("t".repeat(65), "k"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("bizType is longer than 64 characters (65)");
  }

  @Test
  void theConstructorRefusesAnUnhashedLongKey() {
    assertThatThrownBy(() -> new DedupKey("payment", "k".repeat(300)))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("build the key with DedupKey.of");
  }
}
