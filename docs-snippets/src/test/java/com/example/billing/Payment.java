package com.example.billing;

import java.math.BigDecimal;

/** The payload of docs/spring-boot.md's JSON payloads. */
public record Payment(String orderNo, BigDecimal amount) {}
