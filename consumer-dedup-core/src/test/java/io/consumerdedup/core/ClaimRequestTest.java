package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A claim id is written into another claim's takeover note ("Lease of attempt 1 (claim 9f…) ran
 * out, held by …"), which lets the claim it names write its SUCCESS: an id a caller chooses must
 * not be able to read as a part of that text, or one claim could pass for another.
 */
class ClaimRequestTest {
  private static final DedupKey KEY = DedupKey.of("payment", "p-1");

  @Test
  void theLibrarysOwnClaimIdsAndCommonIdFormsAreAccepted() {
    for (String id :
        new String[] {
          ClaimRequest.newClaimId(), "3f2b9c1e-7d4a-4c1b-9e8f-0a1b2c3d4e5f", "claim_7.retry-2"
        }) {
      assertThat(request(id).claimId()).isEqualTo(id);
    }
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "a1) ran out, held by consumer-b; taken over",
        "a1 b2",
        "a1;b2",
        "a1|b2",
        "line\nbreak",
        "é1"
      })
  void anIdThatCouldReadAsPartOfATakeoverNoteIsRefusedNamingTheCharacter(String id) {
    assertThatThrownBy(() -> request(id))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith(
            "claimId may hold only ASCII letters, digits, '-', '_' and '.', but has ")
        .hasMessageNotContaining(id);
  }

  @Test
  void anEmptyOrOverlongIdIsRefusedWithItsLength() {
    assertThatThrownBy(() -> request(""))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("claimId must be 1 to 64 characters, was 0");
    assertThatThrownBy(() -> request("a".repeat(65)))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("claimId must be 1 to 64 characters, was 65");
  }

  private static ClaimRequest request(String claimId) {
    return new ClaimRequest(
        KEY, "consumer-a", Duration.ofMinutes(1), Duration.ofDays(1), null, null, claimId);
  }
}
